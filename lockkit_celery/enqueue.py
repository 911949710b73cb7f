"""The producer's side: take the task's lock before the message is published.

::

    web 1: apply_async(order=7) -> takes <key> (token 12) -> publishes task id f(key, 12)
    web 2: apply_async(order=7) -> <key> is held -> reads token 12 -> AsyncResult(f(key, 12))

The claim and the duplicate answer are the core's (:mod:`lockkit_core.dedupe.claims`); the
lease is not renewed here but lasts ``enqueue_ttl`` plus any countdown: the worker adopts it
with the owner token that travels in the message headers. A publish that fails gives the
lock back before the error propagates.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from celery.result import AsyncResult

from lockkit_core.dedupe import Duplicate, TaskOptions, TaskRecords, claim_key

from .signals import report_duplicate

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
        now = datetime.datetime.now(eta.tzinfo or datetime.timezone.utc)
        if eta.tzinfo is None:
            now = now.replace(tzinfo=None)
        return max(0.0, (eta - now).total_seconds())
    return 0.0


def _answer(
    task: Any, dup: Duplicate, opts: TaskOptions, callbacks: bool, records: TaskRecords
) -> AsyncResult:
    report_duplicate(task, dup, opts.on_duplicate, records.kit.labels)
    if opts.on_duplicate == "raise" or dup.original is None:
        raise dup.error()
    if callbacks:
        raise dup.error("its callbacks (link, link_error, chain) were not scheduled")
    return task.AsyncResult(dup.original)


def enqueue(
    task: Any,
    records: TaskRecords,
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
    ``"raise"`` or the call carries ``callbacks``, which the queued task would not run;
    with ``"retry"`` it is published without the lock, and the worker runs it after the
    original."""
    lease = opts.enqueue_ttl + delay
    # A caller-chosen id (task_id=, a canvas) is recorded with the claim, before the key.
    claim = claim_key(records, task.name, key, lease, once=opts.once is not None, task_id=task_id)
    if isinstance(claim, Duplicate):
        if claim.reason == "enqueued" and opts.on_duplicate == "retry":
            return publish(task_id, {**headers, HEADER: {"key": key}})
        return _answer(task, claim, opts, callbacks, records)
    if task_id is None:
        task_id = claim.task_id
    try:
        if task_id is None:  # a store without fencing tokens: the id cannot be derived
            task_id = str(uuid.uuid4())
            claim.name_task(task_id)
        return publish(task_id, {**headers, HEADER: {"key": key, "owner": claim.owner}})
    except BaseException:
        claim.give_back(task_id)
        raise
