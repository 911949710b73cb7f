"""The producer's side: take the task's lock before the message is published.

::

    web 1: apply_async(order=7) -> takes <key> (token 12) -> publishes task id f(key, 12)
    web 2: apply_async(order=7) -> <key> is held -> reads token 12 -> AsyncResult(f(key, 12))

The lease is handed off (not renewed here) for ``enqueue_ttl`` plus any countdown: the
worker adopts it with the owner token that travels in the message headers. A publish that
fails gives the lock back before the error propagates.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from celery.result import AsyncResult

from lockkit_core import LockKit
from lockkit_core.dedupe import derived_task_id
from lockkit_core.dedupe.claims import claim_key, put_id

from .duplicates import report_duplicate
from .errors import TaskLocked
from .settings import TaskOptions

__all__ = ["HEADER", "delay_of", "enqueue"]

#: The message header that carries the lock from the producer to the worker.
HEADER = "lockkit"

Publish = Callable[[str | None, dict[str, Any]], AsyncResult]


def delay_of(options: Mapping[str, Any]) -> float:
    """Seconds until a message with these ``apply_async`` options may run."""
    countdown = options.get("countdown")
    if countdown:
        return max(0.0, float(countdown))
    eta = options.get("eta")
    if isinstance(eta, datetime.datetime):
        now = datetime.datetime.now(eta.tzinfo or datetime.UTC)
        if eta.tzinfo is None:
            now = now.replace(tzinfo=None)
        return max(0.0, (eta - now).total_seconds())
    return 0.0


def _duplicate(
    task: Any,
    key: str,
    original: str | None,
    opts: TaskOptions,
    reason: str,
    callbacks: bool,
) -> AsyncResult:
    report_duplicate(task, key, None, original, reason)
    if opts.on_duplicate == "raise" or original is None or callbacks:
        raise TaskLocked(
            key,
            original,
            f"task {task.name} is already "
            + ("queued or running" if reason == "enqueued" else "done within its once window")
            + (f" as {original}" if original else "")
            + f" (lock key {key!r})"
            + ("; its callbacks (link, link_error, chain) were not scheduled" if callbacks else ""),
        )
    return task.AsyncResult(original)


def enqueue(
    task: Any,
    kit: LockKit,
    key: str,
    opts: TaskOptions,
    task_id: str | None,
    headers: dict[str, Any],
    delay: float,
    publish: Publish,
    *,
    callbacks: bool = False,
) -> AsyncResult:
    """Lock ``key`` for the call and publish it, or answer with the task that holds it.

    A duplicate raises :class:`TaskLocked` instead of answering when ``on_duplicate`` is
    ``"raise"`` or the call carries ``callbacks``, which the queued task would not run."""
    lease = opts.enqueue_ttl + delay
    claim = claim_key(kit, key, lease, once=opts.once is not None)
    lock = claim.lock
    if lock is None:
        if (
            claim.reason == "enqueued"
            and claim.original is not None
            and (opts.on_duplicate == "retry")
        ):  # queue it anyway: the worker serialises
            return publish(task_id, {**headers, HEADER: {"key": key}})
        return _duplicate(task, key, claim.original, opts, claim.reason, callbacks)
    record: dict[str, Any] = {"key": key, "owner": lock.owner}
    derived = derived_task_id(kit, key, lock.token)
    marker = None
    try:
        if task_id is None and derived is not None:
            task_id = derived
        elif task_id != derived:
            if task_id is None:
                task_id = str(uuid.uuid4())
            marker = put_id(kit, key, task_id, lease)
            record["id_owner"] = marker.owner
        result = publish(task_id, {**headers, HEADER: record})
    except BaseException:
        lock.release()
        if marker is not None and marker.owned():
            marker.release()
        raise
    return result
