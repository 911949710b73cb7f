"""The producer's side of task deduplication: claim a call's key before the task is queued.

::

    web 1: enqueue(order=7) -> takes <key> (token 12) -> queues the task, id f(key, 12) or R
    web 2: enqueue(order=7) -> <key> is held -> reads the task id -> answers with that task

The adapter queues the task between :func:`claim_key` and, when the queue chose the task id
itself, :func:`put_id`; a queueing that fails gives ``claim.lock`` back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..backends.base import Capability
from ..errors import ConfigError
from ..kit import LockKit
from ..lock import Lock
from .records import done_key, find_done_task_id, find_task_id, id_key

__all__ = ["Claim", "claim_key", "put_id", "require_hand_off"]


def require_hand_off(kit: LockKit, setting: str) -> None:
    """Refuse a store whose leases cannot pass from the process that enqueues to the worker
    (:meth:`Lock.hand_off`): ZooKeeper's end with the session that took them. ``setting``
    names where the user chose the store."""
    if Capability.HAND_OFF not in kit.backend.capabilities:
        raise ConfigError(
            f"{kit.backend.describe()} cannot hand a lease on to another process (its leases "
            "end with the client session that took them), and task deduplication passes the "
            f"enqueue lock to the worker that runs the task; set {setting} to a store that can, "
            "such as redis:// (or file:// when every process runs on one host)"
        )


@dataclass(frozen=True)
class Claim:
    """What :func:`claim_key` found: ``lock`` held for this call, or the task that has it.

    ``reason`` is ``""`` when the key was taken, ``"enqueued"`` when a queued or running task
    holds it, ``"done"`` when a success within the ``once`` window recorded it; ``original``
    names that task (None when it could not be told)."""

    lock: Lock | None
    original: str | None = None
    reason: str = ""


def claim_key(
    kit: LockKit, key: str, lease: float, *, once: bool, derived: bool = True, settle: float = 0.0
) -> Claim:
    """Take ``key`` for ``lease`` seconds (not renewed: the worker adopts it), or find its task.

    ``derived=False`` is for queues that choose task ids themselves: the holder's id is known
    only once its :func:`put_id` record is written, so a duplicate waits up to ``settle``
    seconds for it to appear."""
    if once and kit.admin.info(done_key(key)) is not None:
        return Claim(None, find_done_task_id(kit, key), "done")
    deadline = time.monotonic() + settle
    attempt = 0
    while True:
        lock = kit.lock(key, ttl=lease, auto_renew=False, reentrant=False)
        if lock.acquire(blocking=False, timeout=0):
            break
        original = find_task_id(kit, key, derived=derived)
        if original is not None:
            return Claim(None, original, "enqueued")
        # Released between the attempt and the read, or its holder is still queueing.
        attempt += 1
        if attempt >= 3 and time.monotonic() >= deadline:
            return Claim(None, None, "enqueued")
        if attempt >= 3:
            time.sleep(min(0.05, 0.002 * attempt))
    if once and kit.admin.info(done_key(key)) is not None:
        lock.release()  # the task succeeded between the first check and the acquisition
        return Claim(None, find_done_task_id(kit, key), "done")
    return Claim(lock)


def put_id(kit: LockKit, key: str, task_id: str, lease: float) -> Lock:
    """Record that ``task_id`` holds ``key`` (for a task id not derived from the key's token);
    the returned handle's ``owner`` goes to the worker, which adopts the record."""
    marker = kit.lock(id_key(key, task_id), ttl=lease, auto_renew=False, reentrant=False)
    marker.acquire(blocking=False, timeout=0)
    return marker
