"""The grant decision of ``file://``: what each operation does to a key's record.

Each function runs inside the key's critical section (:meth:`RecordStore.locked`): it reads the
record, decides, writes the record back, and returns its answer with the queue entry it handed
the key to, if any (whose waiter the caller then wakes, outside the critical section).
Ownership lives in the record (owner token, expiry on CLOCK_MONOTONIC, holder pid), so a
holder that is stopped (SIGSTOP, a debugger) is taken over once its TTL has passed, and one
whose process is gone frees its keys at once.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import TYPE_CHECKING

from ...errors import LockKitError
from ..base import Grant, Lease
from . import store as store_module
from .queue import join, pop_live
from .record import FREE, Entry, Record, hint_of, owner_id, owns, without
from .store import RecordStore, Slot

if TYPE_CHECKING:
    from .queue import FileWaiter


def lease(rec: Record, key: str, now: float) -> Lease:
    """What the admin layer shows of the held record ``rec``."""
    assert rec.owner is not None
    return Lease(
        key,
        hint_of(rec.owner),
        rec.fence,
        left(rec.expires, now),
        f"{rec.host.decode('utf-8', 'replace')} pid {abs(rec.pid)}"
        + (" (exited)" if rec.pid < 0 else ""),
        started=rec.started or None,
    )


def left(expires: float, now: float) -> float | None:
    """Seconds left of a lease; None for a lock held without one (``ttl=None``)."""
    return None if math.isinf(expires) else expires - now


#: records removed by one call, so that no caller pays for many
SWEEP_BATCH = 256
#: how long a removal waits for a key's critical section: one stuck there (a stopped
#: process) must not hold up the unrelated release that swept
SWEEP_PATIENCE = 0.05


class Grants:
    """The decisions on the records of one :class:`RecordStore`; each method takes the slot
    whose critical section the caller holds."""

    def __init__(self, store: RecordStore) -> None:
        self.store = store

    def _hand_to(self, slot: Slot, rec: Record, head: Entry, now: float) -> None:
        """Make the waiter of ``head`` (popped from ``rec.queue``) the holder, new fence."""
        tail = b"%d %d %s %s" % (head.pid, head.pidns, self.store.boot, head.host)
        head.handed = rec.fence + 1
        head.handed_until = now + head.ttl
        self.store.write(
            slot,
            head.handed,
            head.owner,
            head.handed_until,
            head.ttl,
            rec.queue,
            tail,
            started=time.time(),
        )
        self.store.written.pop(slot.key, None)

    def _hand_on(self, slot: Slot, rec: Record, now: float) -> Entry | None:
        """Give the key of ``rec`` (which its holder gives up) to the oldest live waiter, or
        free it. Returns the entry handed to, whose waiter is to be woken."""
        head = pop_live(self.store, rec, now) if rec.queue else None
        if head is None:
            self.store.write(slot, rec.fence, FREE, 0.0, 0.0, b"", self.store.me, started=0.0)
            return None
        self._hand_to(slot, rec, head, now)
        return head

    def pass_on(self, slot: Slot, entry: Entry) -> Entry | None:
        """Hand the key on if the hand-over to ``entry`` (whose waiter's socket is closed) is
        untouched: a waiter that takes a hand-over it was not told of rewrites the record
        first (:meth:`claim`), so one that left without leaving the queue is all this skips."""
        rec = self.store.read(slot)
        if (
            rec is None
            or rec.owner != entry.owner
            or rec.fence != entry.handed
            or rec.expires != entry.handed_until
        ):
            return None
        return self._hand_on(slot, rec, time.monotonic())

    def claim(self, slot: Slot, owner: str, fence: int) -> bool:
        """Take the hand-over of ``fence`` to ``owner``, seen in the record rather than told:
        rewrite its expiry, so that it is never passed on (see :meth:`pass_on`)."""
        store = self.store
        rec = store.read(slot)
        now = time.monotonic()
        if rec is None or not owns(rec.owner, owner) or rec.fence != fence:
            return False
        if not store.current(rec, now):
            return False
        expires = max(now + rec.ttl, rec.expires + 1e-6)
        store.write(
            slot, rec.fence, rec.owner, expires, rec.ttl, rec.queue, store.me, started=rec.started
        )
        return True

    def try_acquire(
        self, slot: Slot, owner: str, ttl: float, waiter: FileWaiter | None
    ) -> tuple[Grant, Entry | None]:
        """Take the key if it is free, its lease ran out, or its holder process is gone, and no
        live waiter queued before the caller; a blocking caller (``waiter``) joins the queue."""
        store = self.store
        rec = store.read(slot)
        now = time.monotonic()
        mine = owner_id(owner)
        if rec is None:
            fence = store.fences.first()
            store.write(slot, fence, mine, now + ttl, ttl, b"", store.me, started=time.time())
            if waiter is not None:
                waiter.granted = True
            return Grant(True, fence), None
        if owns(rec.owner, owner) and store.current(rec, now):
            # A retried request, or a lock handed to this waiter: renew, keep the token.
            queue = without(rec.queue, mine) if rec.queue else b""
            store.write(slot, rec.fence, mine, now + ttl, ttl, queue, store.me, started=rec.started)
            return Grant(True, rec.fence), None
        if store.held(rec, now):
            if waiter is not None:
                join(store, rec, mine, ttl, now, waiter)
                store.write(
                    slot,
                    rec.fence,
                    rec.owner or FREE,
                    rec.expires,
                    rec.ttl,
                    rec.queue,
                    rec.tail(),
                    started=rec.started,
                )
            return Grant(False, retry_after=left(rec.expires, now)), None
        # Free, lapsed, or its holder is gone. Waiters come first, in order; a blocking caller
        # keeps its place or joins at the tail, a non-blocking one only hands the key on.
        if waiter is not None and rec.queue:
            join(store, rec, mine, ttl, now, waiter)
        head = pop_live(store, rec, now) if rec.queue else None
        fence = rec.fence + 1
        if head is None or owns(head.owner, owner):
            store.write(slot, fence, mine, now + ttl, ttl, rec.queue, store.me, started=time.time())
            if waiter is not None:
                waiter.granted = True
            return Grant(True, fence), None
        self._hand_to(slot, rec, head, now)
        return Grant(False, retry_after=left(head.ttl, 0.0)), head

    def release(self, slot: Slot, owner: str) -> tuple[bool, Entry | None]:
        """Free the key if ``owner`` holds it, handing it to the oldest live waiter if any; True
        if the lease had not run out."""
        store = self.store
        rec = store.read(slot)
        if rec is None or not owns(rec.owner, owner):
            return False, None
        now = time.monotonic()
        if not rec.queue:
            store.write(slot, rec.fence, FREE, 0.0, 0.0, b"", store.me, started=0.0)
            return store.current(rec, now), None
        return store.current(rec, now), self._hand_on(slot, rec, now)

    def leave_queue(self, slot: Slot, owner: str) -> Entry | None:
        """Drop ``owner``'s entry; pass the key on if it was handed to ``owner`` meanwhile."""
        rec = self.store.read(slot)
        if rec is None:
            return None
        mine = owner_id(owner)
        queue = without(rec.queue, mine)
        if owns(rec.owner, owner):
            rec.queue = queue
            return self._hand_on(slot, rec, time.monotonic())
        if len(queue) != len(rec.queue):
            self.store.write(
                slot,
                rec.fence,
                rec.owner or FREE,
                rec.expires,
                rec.ttl,
                queue,
                rec.tail(),
                started=rec.started,
            )
        return None

    def extend(self, slot: Slot, owner: str, ttl: float) -> bool:
        """Reset the lease to ``ttl`` if ``owner`` holds it; a lease that ran out stays lost."""
        rec = self.store.read(slot)
        now = time.monotonic()
        if rec is None or not owns(rec.owner, owner) or not self.store.current(rec, now):
            return False
        self._renew(slot, rec, now + ttl, ttl)
        return True

    def sweep(self, everything: bool = False) -> None:
        """Remove the records this process left free at least ``IDLE_SECONDS`` ago, and the
        oldest beyond ``IDLE_MAX`` (see :mod:`.store`), at most :data:`SWEEP_BATCH` of them;
        all of them if ``everything``."""
        idle = self.store.idle
        while idle:
            cutoff = time.monotonic() - (0.0 if everything else store_module.IDLE_SECONDS)
            excess = len(idle) - store_module.IDLE_MAX
            batch: list[str] = []
            try:
                for key, at in idle.items():
                    if (at > cutoff and len(batch) >= excess) or len(batch) == SWEEP_BATCH:
                        break
                    batch.append(key)
            except RuntimeError:
                return  # another thread changed it meanwhile: a later call sweeps
            if not batch:
                if not everything:
                    self._plan_sweep(full=False)
                return
            for key in batch:
                idle.pop(key, None)
                with contextlib.suppress(LockKitError):  # that file stays; not the caller's
                    self.store.locked_briefly(key, SWEEP_PATIENCE, self.remove_if_free)
            if not everything:
                self._plan_sweep(full=len(batch) == SWEEP_BATCH)
                return

    def _plan_sweep(self, full: bool) -> None:
        store = self.store
        store.sweep_at = 0.0  # at once if the batch was full, or on a surprise
        if not full and len(store.idle) <= store_module.IDLE_MAX:
            with contextlib.suppress(RuntimeError, StopIteration):
                oldest = next(iter(store.idle.values())) if store.idle else time.monotonic()
                store.sweep_at = oldest + store_module.IDLE_SECONDS

    def remove_if_free(self, slot: Slot) -> bool:
        """Delete the record if it is free and nobody queues: a free key costs nothing."""
        rec = self.store.read(slot)
        if rec is not None and (rec.owner is not None or rec.queue):
            return False
        self.store.remove(slot, 0 if rec is None else rec.fence)
        return True

    def adopt(self, slot: Slot, owner: str, ttl: float) -> Grant:
        """Renew ``owner``'s current lease to ``ttl`` and return its token; ``Grant(False)``
        if ``owner`` does not hold the key (a free key is never taken)."""
        rec = self.store.read(slot)
        now = time.monotonic()
        if rec is None or not owns(rec.owner, owner) or not self.store.current(rec, now):
            return Grant(False)
        self._renew(slot, rec, now + ttl, ttl)
        return Grant(True, rec.fence)

    def detach(self, slot: Slot, owner: bytes) -> None:
        """Rewrite ``owner``'s record held by this process with the holder ``self.store.me`` (which
        the exit hook has made a negative pid: the lease then runs until its TTL)."""
        rec = self.store.read(slot)
        if (
            rec is not None
            and rec.owner == owner
            and rec.pid == self.store.pid
            and not math.isinf(rec.expires)
        ):
            self._renew(slot, rec, rec.expires, rec.ttl)

    def _renew(self, slot: Slot, rec: Record, expires: float, ttl: float) -> None:
        """Rewrite the held ``rec`` with this process as its writer and a new expiry."""
        assert rec.owner is not None
        self.store.write(
            slot, rec.fence, rec.owner, expires, ttl, rec.queue, self.store.me, started=rec.started
        )

    def info(self, slot: Slot, key: str) -> Lease | None:
        """The lease on the key, or None if it is free."""
        rec = self.store.read(slot)
        now = time.monotonic()
        return lease(rec, key, now) if rec is not None and self.store.held(rec, now) else None

    def force_release(self, slot: Slot) -> tuple[bool, Entry | None]:
        """Free the key whoever holds it, handing it to the oldest live waiter if any."""
        rec = self.store.read(slot)
        if rec is None or rec.owner is None:
            return False, None
        now = time.monotonic()
        return self.store.held(rec, now), self._hand_on(slot, rec, now)
