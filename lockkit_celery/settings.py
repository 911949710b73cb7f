"""Where a task's lock options come from, and the one ``LockKit`` per Celery app.

Each option is decided, first given wins, from: the call (``apply_async(lockkit={...})``),
the task (``@locked_task(ttl=...)`` or a ``lockkit_ttl`` class attribute), the app
(``app.conf.lockkit_ttl``), then the default here. "Given" is decided with a sentinel, so
``once=None`` or ``wait=0`` on a task does override an app-wide setting.

The store is ``app.conf.lockkit = {"URL": ..., "NAMESPACE": ..., "TTL": ...}`` (the core's
settings mapping) with ``lockkit_url``, ``lockkit_namespace`` and ``lockkit_options`` on
top; the namespace defaults to ``"celery"`` and the URL to the core's ``file://`` default.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Final

from celery import Celery

from lockkit_core import ConfigError, LockKit
from lockkit_core.config import UNSET, LockKitConfig, check_ttl
from lockkit_core.dedupe import require_hand_off
from lockkit_core.dedupe.options import DEFAULTS, TaskOptions

__all__ = ["DEFAULTS", "ON_DUPLICATE", "TaskOptions", "kit_for", "resolve", "visibility_timeout"]

ON_DUPLICATE: Final = ("skip", "retry", "raise")


#: Celery's own default for the Redis and SQS brokers.
DEFAULT_VISIBILITY_TIMEOUT: Final = 3600.0


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"lockkit option {name} must be True or False, got {value!r}")
    return value


def _seconds(name: str, value: Any, *, zero: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok and math.isfinite(value) and (value > 0 or (zero and value == 0)):
        return float(value)
    least = "zero or more" if zero else "a positive number of"
    raise ConfigError(f"lockkit option {name} must be {least} seconds, got {value!r}")


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
    if per_call:
        unknown = sorted(set(per_call) - set(DEFAULTS) - {"key"})
        if unknown:
            raise ConfigError(
                f"unknown lockkit option(s) {', '.join(unknown)}; known: "
                f"{', '.join(['key', *DEFAULTS])}"
            )
    got: dict[str, Any] = {}
    for name, default in DEFAULTS.items():
        value = per_call.get(name, UNSET) if per_call else UNSET
        if value is UNSET:
            value = getattr(task, f"lockkit_{name}", UNSET)
        if value is UNSET:
            value = conf.get(f"lockkit_{name}", UNSET)
        got[name] = default if value is UNSET else value
    ttl = got["ttl"]
    if ttl is UNSET:
        ttl = kit_for(task.app).config.ttl
    if got["on_duplicate"] not in ON_DUPLICATE:
        raise ConfigError(
            f"lockkit option on_duplicate must be one of {', '.join(ON_DUPLICATE)}, "
            f"got {got['on_duplicate']!r}"
        )
    once = got["once"]
    return TaskOptions(
        enabled=_flag("enabled", got["enabled"]),
        ttl=check_ttl(ttl),
        on_duplicate=got["on_duplicate"],
        enqueue_lock=_flag("enqueue_lock", got["enqueue_lock"]),
        once=None if once is None else check_ttl(once, "once"),
        wait=_seconds("wait", got["wait"], zero=True),
        enqueue_ttl=check_ttl(got["enqueue_ttl"], "enqueue_ttl"),
        # A copy redelivered after the visibility timeout must still find its task finished,
        # and a finished task's run lock must outlast a running one's (see dedupe.records).
        remember=max(check_ttl(got["remember"], "remember"), visibility_timeout(task.app), 2 * ttl),
    )


def visibility_timeout(app: Celery) -> float:
    """The broker's visibility timeout (Celery's default when it is not set)."""
    options = app.conf.get("broker_transport_options") or {}
    value = options.get("visibility_timeout", DEFAULT_VISIBILITY_TIMEOUT)
    return _seconds("broker_transport_options['visibility_timeout']", value)


_kits: weakref.WeakKeyDictionary[Celery, LockKit] = weakref.WeakKeyDictionary()
_kits_lock = threading.Lock()


def store_config(app: Celery) -> LockKitConfig:
    """The app's lock store settings (see the module docstring)."""
    conf = app.conf
    mapping = conf.get("lockkit") or {}
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"app.conf.lockkit must be a mapping, got {type(mapping).__name__}")
    upper = {str(k).upper() for k in mapping}
    return LockKitConfig.from_mapping(
        mapping,
        url=conf.get("lockkit_url", UNSET),
        namespace=conf.get("lockkit_namespace", UNSET if "NAMESPACE" in upper else "celery"),
        options=conf.get("lockkit_options", UNSET),
    )


def kit_for(app: Celery) -> LockKit:
    """The app's ``LockKit``, made on first use (one per app, never one per process)."""
    kit = _kits.get(app)
    if kit is None:
        with _kits_lock:
            kit = _kits.get(app)
            if kit is None:
                kit = LockKit(config=store_config(app))
                try:
                    require_hand_off(kit, "app.conf.lockkit_url")
                except ConfigError:
                    kit.close()
                    raise
                _kits[app] = kit
    return kit
