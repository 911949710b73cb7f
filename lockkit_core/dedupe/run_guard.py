"""The worker's side of task deduplication: one copy of a task id at a time, one task per key.

:func:`start_run` takes what a run needs. On the happy path (the producer handed over its
owner token) steps 1 and 2 are one store operation (``Backend.begin_run``: only the copy that
takes the ``run`` record adopts ``<key>``), and the end of the run is one more
(``Backend.end_run``: the finished record if not yet written, then ``<key>``, then ``run``);
the local renewals stop without a round trip. Otherwise one store operation a step:

1. take the ``run`` record, renewed while the task runs. A second copy of the same task id
   finds it held: ``"finished"`` if the ``finished`` record is there, else ``"running"``.
2. adopt ``<key>`` with the owner token the producer handed over (and, for a caller-chosen
   task id, its the ``id`` record record with the owner derived from it). That is the
   whole happy path: nobody else could have held the key since the call was queued.
3. otherwise (no owner: the call was not locked at enqueue, or its lease ran out in the
   queue, or this task id already ran and freed it): the ``finished`` record means
   ``"finished"``; with ``once``, a ``done`` marker means ``"done"``; then write the
   ``id`` record and take ``<key>`` afresh, or answer ``"busy"`` if another task id holds it.

What the adapter does with a :class:`~lockkit_core.dedupe.answers.Duplicate` answer (drop,
defer, mirror, raise) is its own translation of ``on_duplicate``. :meth:`RunGuard.succeeded`
writes the ``once`` markers and the finished record before the result is stored;
:meth:`RunGuard.ended` frees ``<key>`` and the ``run`` record when the task is over;
:meth:`RunGuard.retried` hands ``<key>`` to the retried copy.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from .. import lease, observe
from ..errors import LockError, LockLost, LockNotOwned
from ..lock import Lock, new_owner_token
from .answers import Duplicate
from .options import TaskOptions
from .records import (
    TaskRecords,
    check_call_key,
    derived_owner,
    derived_task_id,
    done_key,
    finished_key,
    id_key,
    run_key,
)

__all__ = ["RunGuard", "start_run", "try_lock"]

log = logging.getLogger("lockkit.dedupe")


@dataclass
class RunGuard:
    """The locks one running copy of a task holds: ``run`` (its task id), ``key_lock`` (the
    call's key) and ``id_lock`` (the key's id record, for a caller-chosen task id)."""

    records: TaskRecords
    key: str
    task_id: str
    opts: TaskOptions
    run: Lock
    key_lock: Lock | None = None
    id_lock: Lock | None = None
    finished: bool = False

    @property
    def owner(self) -> str | None:
        """The owner token of ``<key>`` (to hand to a retried copy)."""
        return None if self.key_lock is None else self.key_lock.owner

    def succeeded(self) -> None:
        """Write the success markers and the finished record; called before the result is
        stored, so that whoever sees the result also sees them.

        Without ``once`` the run is over then: the finished record, ``<key>`` and ``run`` go
        in one store operation (:meth:`ended` has nothing left to do). A late copy finds the
        finished record; a deferred duplicate waiting on this task finds it too, so it does
        not take the task for lost (:meth:`TaskRecords.lost`) before its result is stored.
        With ``once``, ``<key>`` stays held until the result is stored: a call answered
        "done" is told to read it."""
        if self.opts.once is None:
            self._release(self._key_locks(), self._finished_marker())
            return
        self.records.put_marker(done_key(self.key, self.task_id), self.opts.once)
        self.records.put_marker(done_key(self.key), self.opts.once)
        self._mark_finished()

    def _mark_finished(self) -> None:
        if not self.finished:
            self.finished = True
            try:
                self.records.mark_finished(self.task_id, self.opts.remember)
            except LockError as exc:  # the result stands; only a late copy is not dropped
                observe.event(log, logging.WARNING, "mark_failed", self.key,
                              "task %s (key %r) could not be marked finished: %s",
                              self.task_id, self.key, exc, task_id=self.task_id)  # fmt: skip

    def _finished_marker(self) -> tuple[str, str, float] | None:
        """The finished record for :meth:`ended`'s batch, unless it was written already."""
        if self.finished:
            return None
        self.finished = True
        return self.records.marker(finished_key(self.task_id), self.opts.remember)

    def retried(self, lease: float) -> None:
        """Hand ``<key>`` off for ``lease`` seconds to the retried copy (same task id, which
        adopts it) and free the ``run`` record so that copy may run."""
        try:
            for lock in self._key_locks():
                lock.hand_off(lease)
            self.key_lock = self.id_lock = None
        except LockError as exc:
            self._failed("hand_off_failed", exc)
        finally:
            self._release(self._key_locks())

    def ended(self) -> None:
        """The task is over (whatever its outcome): record it finished, then free ``<key>``
        and, last, the ``run`` record (a late copy that gets it then finds the record)."""
        # One store operation: the finished record (if succeeded() did not write it), then
        # <key>, then the run record last (a late copy that gets it then finds the record).
        self._release(self._key_locks(), self._finished_marker())

    def give_back(self) -> None:
        """Free what :func:`start_run` took, without marking anything (the copy did not run)."""
        self._release(self._key_locks())

    def _key_locks(self) -> list[Lock]:
        # The key before its id record: a producer that names the task late (Claim.name_task)
        # either writes before the record is freed here, or finds the key freed.
        return [lock for lock in (self.key_lock, self.id_lock) if lock is not None]

    def _release(self, keys: list[Lock], marker: tuple[str, str, float] | None = None) -> None:
        """Put ``marker``, free ``keys`` in order and the ``run`` record last, in one store
        operation; their renewal stops here without another. A lease lost meanwhile is
        reported (logged, ``on_lost``), never freed under another owner.

        The keys are freed only while the run record is still ours: a copy that took the run
        over (ours expired: the worker stalled past its lease) adopted them with the same
        owner token, so they are that copy's now, and are left to it."""
        self.key_lock = self.id_lock = None
        held = [lock.detach() for lock in keys if lock.owned()]
        run = self.run.detach() if self.run.owned() else None
        if run is None:
            if held:  # lost already (the watchdog reported it): leave the keys to run out
                self._failed("lost", LockLost(self.key, "the run record was lost before the "
                             "run ended; the call's key is left to its lease"))  # fmt: skip
            if marker is None:
                return  # succeeded() ended the run already
            held = []
        try:
            answers = self.records.backend.end_run(
                [(hold.full_key, hold.owner) for hold, _ in held],
                marker,
                None
                if run is None
                else (run[0].full_key, run[0].owner, lease.on_store(self.opts.ttl)),
            )
        except LockError as exc:  # an error on the way out is the one to report
            self._failed("release_failed", exc)
            return
        for (hold, was_lost), released in zip([*held, *([run] if run else [])], answers,
                                              strict=True):  # fmt: skip
            try:
                hold.settle(released, was_lost=was_lost)
            except LockError as exc:
                self._failed("lost", exc)

    def _failed(self, event: str, exc: LockError) -> None:
        observe.event(log, logging.WARNING, event, self.key, "task %s (key %r): %s",
                      self.task_id, self.key, exc, task_id=self.task_id)  # fmt: skip


def try_lock(lock: Lock, wait: float) -> bool:
    """Acquire ``lock`` waiting up to ``wait`` seconds (0: one attempt)."""
    return lock.acquire(timeout=wait) if wait > 0 else lock.acquire(blocking=False, timeout=0)


def start_run(
    records: TaskRecords,
    task_name: str,
    key: str,
    task_id: str,
    opts: TaskOptions,
    owner: str | None = None,
    *,
    derived: bool = True,
) -> RunGuard | Duplicate:
    """Take what a run needs (module docstring, steps 1-3), or say why it may not run.

    Whatever it took is given back before it answers a :class:`Duplicate` or raises."""
    kit = records.kit
    check_call_key(key)
    name = run_key(task_id)
    run: Lock | None = None
    batched, refused, adopted = False, False, None
    if owner:
        # Steps 1 and 2 in one store operation (Backend.begin_run): a copy that does not get
        # the run record does not touch the key.
        claim = records.lock_maker(opts.ttl)(name, new_owner_token())
        handle = records.lock_maker(opts.ttl, task_name)(key, owner)
        sent = time.monotonic()
        ran, kept = kit.backend.begin_run(
            claim.full_key, claim.owner or "", handle.full_key, owner, lease.on_store(opts.ttl)
        )
        if ran.acquired:
            batched, run = True, claim
            run.hold_granted(ran, sent)
            if kept.acquired:
                handle.hold_granted(kept, sent)
                adopted = handle
        refused = not batched and opts.wait <= 0  # that was the one attempt
    if run is None:  # no batch, or it did not take the run record: take it on its own
        run = records.lock_maker(opts.ttl)(name)
        if refused or not try_lock(run, opts.wait):
            reason = "finished" if records.finished(task_id) else "running"
            return Duplicate(task_name, key, reason, task_id, task_id)
    guard = RunGuard(records, key, task_id, opts, run, key_lock=adopted)
    try:
        if owner and not batched:  # the run record was waited for: adopt on its own
            adopted = guard.key_lock = _adopt(records, key, owner, opts.ttl)
        busy = _take_key(guard, task_name, owner, derived, adopted)
    except BaseException:
        guard.give_back()
        raise
    if busy is not None:
        guard.give_back()
        return busy
    return guard


def _adopt(records: TaskRecords, key: str, owner: str, ttl: float) -> Lock | None:
    lock = records.lock_maker(ttl)(key, owner)
    try:
        lock.acquire()
    except LockNotOwned:
        return None  # its lease ran out, or it was released
    return lock


def _take_key(
    guard: RunGuard, name: str, owner: str | None, derived: bool, adopted: Lock | None
) -> Duplicate | None:
    records, key, task_id, opts = guard.records, guard.key, guard.task_id, guard.opts
    if adopted is not None and owner is not None:
        if derived_task_id(records.kit, key, adopted.token) != task_id:
            guard.id_lock = _hold_record(records, key, task_id, owner, opts.ttl)
        return None
    if records.finished(task_id):
        return Duplicate(name, key, "finished", task_id, task_id)
    if opts.once is not None and records.done(key):
        return Duplicate(name, key, "done", records.done_task_id(key), task_id)
    fresh = new_owner_token()
    # The id record before the key: whoever finds the key held finds the task that holds it
    # (a duplicate answered with an id that no task has would wait on it forever).
    record, record_owner = id_key(key, task_id), derived_owner(fresh, task_id)
    records.take(record, record_owner, opts.ttl)
    if _take_waiting(records, key, fresh, opts):
        guard.key_lock = _adopt(records, key, fresh, opts.ttl)
        guard.id_lock = _adopt(records, record, record_owner, opts.ttl)
        if guard.key_lock is not None:
            return None
    records.give_back(record, record_owner)
    original, left = records.task_id(key, derived=derived)
    return Duplicate(name, key, "busy", original, task_id, left)


def _hold_record(
    records: TaskRecords, key: str, task_id: str, owner: str, ttl: float
) -> Lock | None:
    """Adopt the id record of ``task_id`` (its owner derived from the key's ``owner``), or
    take it if the producer names the task only after queueing it (django.tasks)."""
    record, record_owner = id_key(key, task_id), derived_owner(owner, task_id)
    lock = _adopt(records, record, record_owner, ttl)
    if lock is None:
        records.take(record, record_owner, ttl)
        lock = _adopt(records, record, record_owner, ttl)
    return lock


def _take_waiting(records: TaskRecords, key: str, owner: str, opts: TaskOptions) -> bool:
    """Take ``key`` for ``owner``, trying again up to ``opts.wait`` seconds (backing off from
    5 ms to 50 ms: this path serves calls that were not locked at enqueue)."""
    deadline = time.monotonic() + opts.wait
    pause = 0.005
    while records.take(key, owner, opts.ttl) is False:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)
    return True
