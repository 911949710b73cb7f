"""The producer's side of task deduplication: claim a call's key before the task is queued.

::

    web 1: enqueue(order=7) -> takes <key> (token 12) -> queues the task, id f(key, 12) or R
    web 2: enqueue(order=7) -> <key> is held -> reads the task id -> answers with that task

The adapter queues the task between :func:`claim_key` and, when the queue chose the task id
itself, :meth:`Claim.name_task`; a queueing that fails calls :meth:`Claim.give_back`. The
hand-over to the worker is the claim's ``owner`` token alone: the worker adopts ``<key>``
with it, and the the ``id`` record record with the owner derived from it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..backends.base import owner_hint
from ..lock import new_owner_token
from .answers import Duplicate
from .records import (
    TaskRecords,
    check_call_key,
    derived_owner,
    derived_task_id,
    done_key,
    id_key,
)

__all__ = ["Claim", "claim_key"]


@dataclass(frozen=True)
class Claim:
    """``key`` taken for this call under ``owner`` for ``lease`` seconds (not renewed: the
    worker adopts it). ``task_id`` is the id derived from its fencing token (None on a store
    without tokens)."""

    records: TaskRecords
    key: str
    owner: str
    lease: float
    task_id: str | None

    def name_task(self, task_id: str) -> None:
        """Record that ``task_id``, not the derived id, holds the key (the worker adopts the
        record with the owner derived from :attr:`owner`).

        A queue may run the task before this (an immediate backend, a fast worker): the
        record is given back if the key is no longer this claim's, so it never outlives the
        call. The worker frees the key before the record, so whichever of the two writes last
        sees the other's work."""
        record, record_owner = id_key(self.key, task_id), derived_owner(self.owner, task_id)
        self.records.take(record, record_owner, self.lease)
        lease = self.records.lease(self.key)
        if lease is None or lease.owner_hint != owner_hint(self.owner):
            self.records.give_back(record, record_owner)

    def give_back(self, task_id: str | None = None) -> None:
        """The task was not queued: free the key (and ``task_id``'s record)."""
        try:
            if task_id is not None and task_id != self.task_id:
                self.records.give_back(
                    id_key(self.key, task_id), derived_owner(self.owner, task_id)
                )
        finally:
            self.records.give_back(self.key, self.owner)


def claim_key(
    records: TaskRecords,
    task_name: str,
    key: str,
    lease: float,
    *,
    once: bool,
    derived: bool = True,
    settle: float = 0.0,
    owner: str | None = None,
    task_id: str | None = None,
) -> Claim | Duplicate:
    """Take ``key`` for ``lease`` seconds under ``owner`` (a fresh token by default), or say
    which task has it.

    ``derived=False`` is for queues that choose task ids themselves: the holder's id is known
    only once its :meth:`Claim.name_task` record is written, so a duplicate waits up to
    ``settle`` seconds for it to appear. A caller-chosen ``task_id`` is recorded before the
    key is taken, so whoever finds the key held finds its task."""
    check_call_key(key)
    if once and records.done(key):
        return Duplicate(task_name, key, "done", records.done_task_id(key))
    owner = owner or new_owner_token()
    named = None if task_id is None else (id_key(key, task_id), derived_owner(owner, task_id))
    if named is not None:
        records.take(*named, lease)
    got = _claim(records, task_name, key, lease, once, derived, settle, owner, task_id)
    if isinstance(got, Duplicate) and named is not None:
        records.give_back(*named)
    return got


def _claim(
    records: TaskRecords,
    task_name: str,
    key: str,
    lease: float,
    once: bool,
    derived: bool,
    settle: float,
    owner: str,
    task_id: str | None,
) -> Claim | Duplicate:
    deadline = time.monotonic() + settle
    attempt = 0
    while True:
        token = records.take(key, owner, lease)
        if token is not False:
            break
        original, left = records.task_id(key, derived=derived, besides=task_id)
        if original is not None:
            return Duplicate(task_name, key, "enqueued", original, countdown=left)
        # Released between the attempt and the read, or its holder is still queueing.
        attempt += 1
        if attempt >= 3 and time.monotonic() >= deadline:
            lease_now = records.lease(key)
            left = None if lease_now is None else lease_now.ttl_remaining
            return Duplicate(task_name, key, "enqueued", None, countdown=left)
        if attempt >= 3:
            time.sleep(min(0.05, 0.002 * attempt))
    if once and records.lease(done_key(key)) is not None:
        records.give_back(key, owner)  # the task succeeded between the first check and now
        return Duplicate(task_name, key, "done", records.done_task_id(key))
    return Claim(records, key, owner, lease, derived_task_id(records.kit, key, token))
