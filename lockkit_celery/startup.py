"""The worker's startup check: settings, lock ttl, ``task_time_limit`` and the broker's
visibility timeout (Redis, SQS) or ``consumer_timeout`` (RabbitMQ).

Run when a worker of an app that uses lockkit starts (``worker_init``); each problem is one
warning naming the setting to change. A worker of an app with no locked task and no
``lockkit`` setting is not touched. :func:`check_app` returns them, for tests and
``celery lockkit check``.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from celery.signals import worker_init

from lockkit_core import ConfigError
from lockkit_core.config import default_url

from .settings import (
    check_settings,
    lockkit_settings,
    resolve,
    store_config,
    visibility_timeout,
)
from .task import LockedTask

__all__ = ["check_app", "uses_lockkit"]

log = logging.getLogger("lockkit.celery")


def check_app(app: Celery) -> list[str]:
    """What is inconsistent in ``app``'s settings for its locked tasks, one line each."""
    if not uses_lockkit(app):
        return []
    try:
        check_settings(app)
    except ConfigError as exc:
        return [str(exc)]
    problems: list[str] = []
    config = store_config(app)
    if config.url == default_url():
        problems.append(
            f"lockkit_url is the default {config.url}: a worker and the processes that enqueue "
            "share locks only if they run on one host, as one user, without systemd's "
            "PrivateTmp; set app.conf.lockkit_url (e.g. to your Redis) to be sure"
        )
    visibility = visibility_timeout(app)
    broker = str(app.conf.broker_url or "")
    amqp = broker.startswith(("amqp", "pyamqp", "rabbitmq"))
    redelivers = amqp or broker.startswith(("redis", "rediss", "sqs", "sentinel"))
    timeout = (
        "RabbitMQ's consumer_timeout (1800 s by default; raise it in rabbitmq.conf, and "
        "tell lockkit nothing: it reads the default)"
        if amqp
        else "the broker's visibility_timeout"
    )
    for name, task in sorted(app.tasks.items()):
        if not isinstance(task, LockedTask) or task.app is not app:
            continue
        opts = resolve(task)
        if not opts.enabled:
            continue
        limit: Any = task.time_limit or app.conf.task_time_limit
        acks_late = task.acks_late if task.acks_late is not None else app.conf.task_acks_late
        if redelivers and acks_late and limit and limit >= visibility:
            problems.append(
                f"task {name}: task_time_limit ({limit:g} s) is not below {timeout} "
                f"({visibility:g} s), so a long run is handed to a second worker; lockkit "
                "defers that copy, but "
                + (
                    "raise consumer_timeout on the RabbitMQ server"
                    if amqp
                    else "raise broker_transport_options['visibility_timeout'] (and "
                    "result_backend_transport_options, visibility_timeout in "
                    "broker_transport_options of beat)"
                )
            )
        if redelivers and opts.ttl >= visibility:
            problems.append(
                f"task {name}: lock ttl ({opts.ttl:g} s) is not below {timeout} "
                f"({visibility:g} s): a copy requeued after a crash waits "
                "longer for the dead worker's lease than the broker waits; lower lockkit_ttl"
            )
        if opts.enqueue_ttl < visibility and redelivers:
            problems.append(
                f"task {name}: lockkit_enqueue_ttl ({opts.enqueue_ttl:g} s) is below "
                f"{timeout} ({visibility:g} s): a task waiting in the queue longer "
                "loses its enqueue lock and a duplicate can be queued; raise lockkit_enqueue_ttl"
            )
    return problems


def uses_lockkit(app: Celery) -> bool:
    """True if ``app`` has a locked task or a ``lockkit`` setting: only such apps are checked
    and touched by the worker signals this package connects."""
    if lockkit_settings(app):
        return True
    return any(isinstance(task, LockedTask) and task.app is app for task in app.tasks.values())


def _check_on_worker_init(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    if app is None or not uses_lockkit(app):
        return
    try:
        problems = check_app(app)
    except Exception:  # a startup check must never stop a worker
        log.exception("lockkit startup check failed")
        return
    for problem in problems:
        log.warning("lockkit: %s", problem)


worker_init.connect(_check_on_worker_init, weak=False)
