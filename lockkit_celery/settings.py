"""Where a task's lock options come from, and the one ``LockKit`` per Celery app.

The options and their checks are the core's (:mod:`lockkit_core.dedupe.options`); each is
decided, first given wins, from: the call (``apply_async(lockkit={...})``), the task
(``@locked_task(ttl=...)`` or a ``lockkit_ttl`` class attribute), the app
(``app.conf.lockkit_ttl``), then the core's default. "Given" is decided with a sentinel, so
``once=None`` or ``wait=0`` on a task does override an app-wide setting.

The store is ``app.conf.lockkit = {"URL": ..., "NAMESPACE": ..., "TTL": ...}`` (the core's
settings mapping) with ``lockkit_url``, ``lockkit_namespace`` and ``lockkit_options`` on
top; the namespace defaults to ``"celery"``. An app that names no store, in a process where
Django is configured with ``settings.LOCKKIT``, uses Django's store; otherwise the URL is the
core's ``file://`` default. An ``app.conf`` key that starts with ``lockkit`` but is none of
:data:`APP_SETTINGS` (``lockkit_tll``) is a :class:`ConfigError` naming the known ones.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Final

from celery import Celery

from lockkit_core import ConfigError, LockKit
from lockkit_core.config import UNSET, LockKitConfig
from lockkit_core.dedupe import DEFAULTS, TaskOptions, TaskRecords, check_names, decide

__all__ = [
    "APP_SETTINGS",
    "TaskOptions",
    "check_settings",
    "kit_for",
    "lockkit_settings",
    "records_for",
    "resolve",
    "store_config",
    "visibility_timeout",
]

#: Celery's own default for the Redis and SQS brokers.
DEFAULT_VISIBILITY_TIMEOUT: Final = 3600.0
#: RabbitMQ's default ``consumer_timeout`` (30 minutes): a delivery not acked by then is
#: requeued and the channel closed, so it bounds an acks_late task as a visibility timeout.
RABBITMQ_CONSUMER_TIMEOUT: Final = 1800.0

#: every ``app.conf`` key lockkit reads
APP_SETTINGS: Final = (
    "lockkit",
    "lockkit_url",
    "lockkit_namespace",
    "lockkit_options",
    "lockkit_clear_stale_on_start",
    "lockkit_doctor",
    *(f"lockkit_{name}" for name in DEFAULTS),
)

#: the ``lockkit_*`` attributes of ``LockedTask`` that are not options
_TASK_ATTRIBUTES: Final = frozenset({"lockkit_key", "lockkit_unique_on", "lockkit_key_for"})

_CORE_KEYS: Final = ("URL", "NAMESPACE", "TTL", "AUTO_RENEW", "TIMEOUT", "OPTIONS")


def lockkit_settings(app: Celery) -> list[tuple[str, str]]:
    """``(name as given, name as lockkit reads it)`` of every ``app.conf`` key that looks like
    lockkit's: ``CELERY_LOCKKIT_TTL`` (Django's namespace), ``LOCKKIT_TTL``, ``lockkit_ttl``."""
    namespace = f"{getattr(app.conf, 'namespace', None) or 'CELERY'}_"
    found = []
    for name in map(str, app.conf):
        plain = name.removeprefix(namespace).lower()
        if plain.startswith("lockkit"):
            found.append((name, plain))
    return found


def check_settings(app: Celery) -> None:
    """Raise :class:`ConfigError` for an ``app.conf`` key that looks like lockkit's but is not
    one (a typo would otherwise be ignored)."""
    unknown = sorted(name for name, plain in lockkit_settings(app) if plain not in APP_SETTINGS)
    if unknown:
        raise ConfigError(
            f"unknown lockkit setting app.conf.{', app.conf.'.join(unknown)}; known: "
            f"{', '.join(APP_SETTINGS)}"
        )


def resolve(task: Any, per_call: Mapping[str, Any] | None = None) -> TaskOptions:
    """The options for one call of ``task``; a bad value is a :class:`ConfigError` naming it.

    Without per-call options the answer is kept on the task: like Celery's own ``task_*``
    settings, the app's ``lockkit_*`` settings are read when the task is first used.
    """
    if not per_call:
        cached: TaskOptions | None = task.__dict__.get("_lockkit_options")
        if cached is None:
            cached = task.__dict__["_lockkit_options"] = _resolve(task, None)
        return cached
    return _resolve(task, per_call)


def _resolve(task: Any, per_call: Mapping[str, Any] | None) -> TaskOptions:
    conf = task.app.conf
    # A LockedTask subclass's class attributes: lockkit_tll = 5 would be ignored silently.
    named = {n for klass in type(task).__mro__ for n in vars(klass) if n.startswith("lockkit_")}
    check_names(
        {n.removeprefix("lockkit_") for n in named - _TASK_ATTRIBUTES},
        f"the attributes of task {task.name}",
        spell="lockkit_{}",
    )
    given: dict[str, Any] = {}
    if per_call:
        check_names({n for n in per_call if n != "key"}, f"apply_async(lockkit=...) of {task.name}")
        given.update({n: v for n, v in per_call.items() if n != "key"})
    for name in DEFAULTS:
        if name not in given:
            given[name] = getattr(task, f"lockkit_{name}", UNSET)
    setting = {name: conf.get(f"lockkit_{name}", UNSET) for name in DEFAULTS}
    opts = decide(given, setting, kit_for(task.app).config.ttl, where=f"task {task.name}")
    # A copy the broker hands out again after its visibility timeout must still find its
    # task id finished.
    return dataclasses.replace(opts, remember=max(opts.remember, visibility_timeout(task.app)))


def _is_amqp(app: Celery) -> bool:
    broker = str(app.conf.broker_url or "")
    return broker.startswith(("amqp", "pyamqp", "rabbitmq"))


def visibility_timeout(app: Celery) -> float:
    """How long the broker waits for an unacknowledged task before it hands it out again:
    ``visibility_timeout`` (Redis, SQS; Celery's default when it is not set) or RabbitMQ's
    ``consumer_timeout`` (its 30 minute default)."""
    if _is_amqp(app):
        return RABBITMQ_CONSUMER_TIMEOUT
    options = app.conf.get("broker_transport_options") or {}
    value = options.get("visibility_timeout", DEFAULT_VISIBILITY_TIMEOUT)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    if not ok:
        raise ConfigError(
            "broker_transport_options['visibility_timeout'] must be a positive number of "
            f"seconds, got {value!r}"
        )
    return float(value)


_kits: weakref.WeakKeyDictionary[Celery, LockKit] = weakref.WeakKeyDictionary()
_records: weakref.WeakKeyDictionary[Celery, TaskRecords] = weakref.WeakKeyDictionary()
_kits_lock = threading.Lock()


def _django_store() -> Mapping[str, Any] | None:
    """``settings.LOCKKIT``'s store keys, when this process has Django configured."""
    conf = sys.modules.get("django.conf")  # never import Django for a plain Celery app
    settings = getattr(conf, "settings", None)
    if settings is None or not settings.configured:
        return None
    mapping = getattr(settings, "LOCKKIT", None)
    if not isinstance(mapping, Mapping):
        return None
    return {k: v for k, v in mapping.items() if str(k).upper() in _CORE_KEYS}


def store_config(app: Celery) -> LockKitConfig:
    """The app's lock store settings (see the module docstring)."""
    check_settings(app)
    conf = app.conf
    mapping = conf.get("lockkit") or {}
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"app.conf.lockkit must be a mapping, got {type(mapping).__name__}")
    names_store = "URL" in {str(k).upper() for k in mapping} or conf.get("lockkit_url")
    if not names_store and not mapping:
        mapping = _django_store() or {}
    upper = {str(k).upper() for k in mapping}
    return LockKitConfig.from_mapping(
        mapping,
        url=conf.get("lockkit_url", UNSET),
        namespace=conf.get("lockkit_namespace", UNSET if "NAMESPACE" in upper else "celery"),
        options=conf.get("lockkit_options", UNSET),
    )


def kit_for(app: Celery) -> LockKit:
    """The app's ``LockKit``, made on first use (one per app, never one per process)."""
    return records_for(app).kit


def records_for(app: Celery) -> TaskRecords:
    """The app's task records on its ``LockKit`` (see :mod:`lockkit_core.dedupe.records`)."""
    records = _records.get(app)
    if records is None:
        with _kits_lock:
            records = _records.get(app)
            if records is None:
                kit = LockKit(config=store_config(app))
                try:
                    records = TaskRecords(kit, "app.conf.lockkit_url")
                except ConfigError:
                    kit.close()
                    raise
                _kits[app] = kit
                _records[app] = records
    return records
