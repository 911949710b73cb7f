"""The worker's side: the run lock is owned by the task result id.

The worker (``manage.py db_worker``, or any backend's) sends ``task_started`` with the
result just before it calls the task; :func:`_on_started` keeps that result for the call,
which then goes through :func:`lockkit_core.dedupe.start_run`: ``run:<result id>`` renewed
while the function runs, ``<key>`` adopted with the owner derived from the nonce in
:data:`HIDDEN` (and the ``id`` record with the owner derived from that), the ``once``
markers and the finished record written on success, the locks released when the function
returns or raises.

A duplicate (the key held by another result, a success within ``once``, a second copy of a
result id) does not run: ``on_duplicate="skip"`` returns None, so the backend stores it as
successful with no return value; ``"raise"`` raises :class:`TaskLocked`, so it is stored as
failed with that error, naming the result that holds the key; ``"retry"`` waits in the
worker for the key (up to ``enqueue_ttl``), since a django.tasks result cannot be queued
again under its own id, and then runs.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from lockkit_core.dedupe import Duplicate, TaskOptions, start_run

from .compat import TaskResult, task_started
from .enqueue import HIDDEN, owner_of, records
from .signals import report_duplicate

__all__ = ["call_in_worker"]

_current = threading.local()


def _on_started(sender: Any, task_result: TaskResult[Any], **_: Any) -> None:
    _current.result = task_result


task_started.connect(_on_started, dispatch_uid="lockkit_django.tasks.started")


def _started_result(func: Callable[..., Any]) -> TaskResult[Any] | None:
    """The result this thread's worker is about to run, if it is a run of ``func``."""
    result: TaskResult[Any] | None = getattr(_current, "result", None)
    _current.result = None
    if result is None or getattr(result.task, "func", None) is not func:
        return None
    return result


def call_in_worker(
    task: Any,
    opts: TaskOptions,
    key_of: Callable[[tuple[Any, ...], dict[str, Any]], str],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    call: Callable[..., Any],
) -> Any:
    """Run ``call(*args, **kwargs)`` under the call's locks, or refuse it as a duplicate.

    Called outside a worker (``task.call(...)`` by hand), it runs without locks."""
    record = kwargs.pop(HIDDEN, None)
    started = _started_result(task.func)
    if started is None or not opts.enabled:
        return call(*args, **kwargs)
    record = record if isinstance(record, dict) else {}
    nonce = record.get("nonce")
    key = key_of(args, kwargs)
    # A row queued by an earlier version carries the owner token itself.
    owner = owner_of(key, nonce) if isinstance(nonce, str) else record.get("owner")
    if opts.on_duplicate == "retry":
        opts = dataclasses.replace(opts, wait=max(opts.wait, opts.enqueue_ttl))
    store = records()
    got = start_run(store, task.name, key, str(started.id), opts, owner, derived=False)
    if isinstance(got, Duplicate):
        report_duplicate(task, got, opts.on_duplicate, store.kit.labels)
        if opts.on_duplicate == "raise":
            raise got.error()
        return None
    try:
        value = call(*args, **kwargs)
        got.succeeded()
        return value
    finally:
        got.ended()
