"""The worker's side: the run lock is owned by the task result id.

The worker (``manage.py db_worker``, or any backend's) sends ``task_started`` with the
result just before it calls the task; :func:`_on_started` keeps that result for the call,
which then goes through :func:`lockkit_core.dedupe.start_run`: ``run:<result id>`` renewed
while the function runs, ``<key>`` adopted with the owner token from :data:`HIDDEN`, the
``once`` markers written on success, both released when the function returns or raises.

A duplicate (the key held by another result, a success within ``once``, a second copy of a
result id) does not run: ``on_duplicate="skip"`` returns None, so the backend stores it as
successful with no return value; ``"raise"`` raises :class:`TaskLocked`, so it is stored as
failed with that error, naming the result that holds the key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from lockkit_core.dedupe import Busy, TaskLocked, id_key, start_run

from ..conf import lockkit_state
from ..task_options import TaskOptions
from .compat import TaskResult, task_started
from .duplicates import report_duplicate
from .enqueue import HIDDEN

__all__ = ["run_locked"]

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


def run_locked(
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
    owner = record.get("owner") if isinstance(record, dict) else None
    kit = lockkit_state().kit
    key = key_of(args, kwargs)
    result_id = str(started.id)
    if owner:
        # The enqueuer's <key>:id:R record, not renewed, would outlive a killed worker by up
        # to enqueue_ttl; this run takes it again under its own renewed lease. The name is R's
        # alone, so nobody else can hold it.
        kit.admin.force_release(id_key(key, result_id))
    got = start_run(kit, key, result_id, opts, owner, derived=False)
    if isinstance(got, Busy):
        report_duplicate(task, key, result_id, got.original, got.reason)
        if opts.on_duplicate == "raise":
            raise TaskLocked(
                key, got.original, f"task {task.name} ({result_id}) did not run: duplicate "
                f"{got.reason} of {got.original or 'an unknown task'} (lock key {key!r})"
            )  # fmt: skip
        return None
    try:
        value = call(*args, **kwargs)
        got.succeeded()
        return value
    finally:
        got.ended()
