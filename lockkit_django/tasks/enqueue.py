"""The enqueueing side: claim the call's key, then queue it; a duplicate gets the queued one.

::

    web 1: send_sms.enqueue(order_id=7) -> takes <key> -> the backend stores result R
                                        -> writes <key>:id:R
    web 2: send_sms.enqueue(order_id=7) -> <key> is held -> reads R -> get_result(R)

The owner token of ``<key>`` travels to the worker in the call's keyword arguments, under
:data:`HIDDEN` (as Celery's travels in the message headers); the worker takes it out before
the function runs, and results handed back here leave it out. A backend that fails to queue
gives the key back. Unlike Celery, the backend chooses the result id, so a duplicate that
comes while the first call is between its claim and its ``<key>:id:R`` record waits up to
:data:`SETTLE` seconds for it.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from typing import Any, Final

from lockkit_core.dedupe import TaskLocked, claim_key, put_id, require_hand_off

from ..conf import lockkit_state
from ..task_options import TaskOptions
from .compat import Task, TaskResult, TaskResultDoesNotExist
from .duplicates import report_duplicate

__all__ = ["HIDDEN", "SETTLE", "enqueue_locked", "without_hidden"]

#: The keyword argument that carries the lock from the enqueuing process to the worker.
HIDDEN: Final = "_lockkit"
#: Seconds a duplicate waits for the first call's result id (record, then result row).
SETTLE: Final = 5.0


def without_hidden(result: TaskResult[Any]) -> TaskResult[Any]:
    """``result`` without :data:`HIDDEN` in its ``kwargs``."""
    if HIDDEN not in result.kwargs:
        return result
    kwargs = {k: v for k, v in result.kwargs.items() if k != HIDDEN}
    clean = dataclasses.replace(result, kwargs=kwargs)
    object.__setattr__(clean, "_return_value", result._return_value)
    return clean


def _delay(task: Task[Any, Any]) -> float:
    if task.run_after is None:
        return 0.0
    now = datetime.datetime.now(task.run_after.tzinfo)
    seconds: float = (task.run_after - now).total_seconds()
    return max(0.0, seconds)


def _answer(task: Any, key: str, original: str | None, reason: str, on_duplicate: str) -> Any:
    what = "queued or running" if reason == "enqueued" else "done within its once window"
    message = f"task {task.name} is already {what}" + (f" as {original}" if original else "")
    message += f" (lock key {key!r})"
    backend = task.get_backend()
    if on_duplicate == "raise" or original is None:
        raise TaskLocked(key, original, message)
    if not backend.supports_get_result:
        raise TaskLocked(key, original, message + f"; backend {backend.alias!r} cannot look "
                         "results up, so the duplicate cannot be answered with it")  # fmt: skip
    deadline = time.monotonic() + SETTLE
    while True:
        try:
            return without_hidden(backend.get_result(original))
        except TaskResultDoesNotExist:
            if time.monotonic() >= deadline:
                raise TaskLocked(
                    key,
                    original,
                    message + "; its result is not visible here yet (was it "
                    "enqueued in a transaction that has not committed? enqueue through "
                    "transaction.on_commit)",
                ) from None
            time.sleep(0.02)


def enqueue_locked(
    task: Any, opts: TaskOptions, key: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> TaskResult[Any]:
    """Queue the call under its key, or answer with the task that holds the key."""
    kit = lockkit_state().kit
    require_hand_off(kit, "settings.LOCKKIT['URL']")
    lease = opts.enqueue_ttl + _delay(task)
    claim = claim_key(kit, key, lease, once=opts.once is not None, derived=False, settle=SETTLE)
    if claim.lock is None:
        report_duplicate(task, key, None, claim.original, claim.reason)
        return _answer(task, key, claim.original, claim.reason, opts.on_duplicate)  # type: ignore[no-any-return]
    lock = claim.lock
    try:
        result = Task.enqueue(task, *args, **kwargs, **{HIDDEN: {"owner": lock.owner}})
        put_id(kit, key, result.id, lease)
    except BaseException:
        lock.release()
        raise
    return without_hidden(result)
