"""``EtcdWaiter``: a lease granted for the attempts, a place in the key's queue, and a watch on
the waiter just before it (or on the record, for the first in line) instead of polling.

Every blocking caller queues, ``fair`` or not, in the transaction of the attempt after its
first failed one (of its first, when this process has waited lately): waiters are served in
the order they asked, and a release wakes only the first of them, never a herd. Queue
entries (``lockkit/q/<sha1 of key>/<owner id>``) live on the backend's short queue lease,
which its waiting threads keep alive, so the entry of a waiter whose process died leaves the
queue within ``queue.QUEUE_TTL`` s, not within the lock's ttl; the entry of a waiter that left
during an outage is deleted by the backend's next attempt. The lease the attempts put under
the record is granted once, so the attempt after a release is one transaction.

Each ``wait()`` opens a watch at the current revision (etcd serves watches that start in the
past from a loop that runs every 100 ms), then reads the watched key once, so a delete since
the last look is not slept through; it lasts at most ``WAIT_SLICE``, so a watch on a member
that went silent costs at most that.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..base import Grant, Waiter
from .client import Call, Steps, b64, unb64
from .layout import LeaseRef, lock_key
from .watch import NextEvents, OpenWatch, Pause

if TYPE_CHECKING:
    from .backend import EtcdBackend

__all__ = ["WAIT_SLICE", "EtcdWaiter"]

#: the longest one wait() watches before the caller asks the store again
WAIT_SLICE = 1.0
#: what a waiter queued with its line (see :mod:`.batch`) knows of the entry before it: one
#: of its line, not a key (its next attempt reads which, if it must watch)
LINE = "\0line"


class EtcdWaiter(Waiter):
    """One caller's registration on one key; see the module docstring."""

    def __init__(self, backend: EtcdBackend, key: str, owner: str) -> None:
        self._backend = backend
        self._key = key
        self._owner = owner
        self.lease: LeaseRef | None = None
        self._queue_lease_id: int | None = None
        #: the create revision of our queue entry; None while not queued
        self.queued_at: int | None = None
        self._revision = 0  #: the revision the record was last seen at
        self._queue_revision = 0  #: ... and our predecessor
        self._predecessor: str | None = None
        self._look_again = False
        self.failed = False  #: an attempt failed: the next one joins the queue
        #: a joining attempt was sent and its answer not read (cancelled while it was on its
        #: way): the entry may be on the store though ``queued_at`` is None
        self.join_in_flight = False
        self._closed = False
        #: a lock lease this waiter no longer needs (it was handed a record under another)
        self._spare: LeaseRef | None = None

    @property
    def owner(self) -> str:
        return self._owner

    @property
    def key(self) -> str:
        return self._key

    def first(self) -> int | None:
        """The queue lease of our entry if we are queued first (nobody before us as far as
        we saw): a release here can then hand us the lock; else None."""
        if self.queued_at is None or self._predecessor is not None or self._look_again:
            return None
        return self._queue_lease_id

    def queued_in_line(self, revision: int, lease_id: int) -> None:
        """Our entry was put at ``revision`` under the queue lease ``lease_id`` together with
        others of our line (see :mod:`.batch`); those before us are of this line."""
        self.queued_at = self._revision = self._queue_revision = revision
        self._queue_lease_id = lease_id
        self._predecessor = LINE
        self.failed = True

    def reached_front(self) -> None:
        """The waiters of our line before us are gone: if one was all we knew to be before
        us, take ourselves to be first (a hand-over still compares it, an attempt reads it)."""
        if self._predecessor == LINE:
            self._predecessor = None

    def handed(self) -> None:
        """A hand-over in place gave us the lock (and deleted our queue entry); our own lock
        lease is not under the record."""
        self.queued_at = None
        self._spare, self.lease = self.lease, None

    def pass_lease(self, after: EtcdWaiter) -> None:
        """Give our unused lock lease to ``after`` (the next waiter here), which would
        otherwise grant one: one lease goes down a line of waiters."""
        if after.lease is None and self._spare is not None:
            after.lease, self._spare = self._spare, None

    def lock_lease(self, ttl: float) -> Steps[LeaseRef]:
        """The lease the next attempt puts under the record, granted on first use."""
        if self.lease is None:
            self.lease = yield from self._backend.leases.grant(ttl)
        return self.lease

    def joined(
        self, revision: int, entry: str, ranges: list[dict[str, Any]], lease_id: int
    ) -> None:
        """A failed attempt put our ``entry`` (base64) in the queue under the queue lease
        ``lease_id`` at ``revision``; ``ranges`` show our entry and the newest two."""
        mine = ranges[0].get("kvs") or [{}]
        created = int(mine[0].get("create_revision", revision))
        self.queued_at = created
        self._revision = self._queue_revision = revision
        self._queue_lease_id = lease_id
        if created != revision:
            # Our entry was there already (we queued before, under a lease since replaced):
            # it keeps its place; the next attempt names the entry before it.
            self._predecessor = None
            self._look_again = True
            return
        before = [kv for kv in ranges[1].get("kvs") or [] if kv["key"] != entry]
        self._predecessor = unb64(before[0]["key"]) if before else None

    def observed(self, revision: int, queue_ranges: list[dict[str, Any]] | None) -> None:
        """What a failed attempt saw: its revision, and for a queued waiter its entry and
        the one before it."""
        self._revision = revision
        if queue_ranges is None:
            return
        if not queue_ranges[0].get("kvs"):
            self.queued_at = None  # our entry expired (we were paused): queue again
            return
        before = queue_ranges[1].get("kvs") or []
        self._predecessor = unb64(before[0]["key"]) if before else None
        self._queue_revision = revision

    def wait(self, timeout: float) -> Grant | None:
        return self._backend.client.run(self.waiting(timeout))

    def waiting(self, timeout: float) -> Steps[Grant | None]:
        """:meth:`wait`'s requests and decisions (run blocking or on a loop)."""
        timeout = min(timeout, WAIT_SLICE)
        deadline = time.monotonic() + timeout
        backend = self._backend
        unknown = self._look_again or self._predecessor == LINE
        if self.queued_at is None or self._queue_lease_id is None or unknown:
            self._look_again = False
            return None  # the next attempt joins the queue, or finds our predecessor
        if not (yield from backend.queue.alive(self._queue_lease_id)):
            self.queued_at = self._queue_lease_id = None
            return None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        yield from self._watch(self._predecessor or lock_key(self._key), deadline)
        return None

    def _watch(self, watched: str, deadline: float) -> Steps[None]:
        """Return when ``watched`` is deleted, or at ``deadline``."""
        watch = yield OpenWatch(watched, deadline - time.monotonic())
        try:
            if watch.broken:  # no member took the watch: wait as a fallback would
                yield Pause(max(0.0, min(0.05, deadline - time.monotonic())))
                return
            # The watch sees deletes after its own revision; one read closes the gap since
            # our last look: if the key is gone already, there is nothing to wait for.
            answer = yield Call(
                "kv/range",
                {"key": b64(watched), "count_only": True},
                f"look at {self._key!r}",
            )
            if not int(answer.get("count", 0)):
                return
            while True:
                remaining = deadline - time.monotonic()
                events = (yield NextEvents(watch, remaining)) if remaining > 0 else []
                if not events or any(event.get("type") == "DELETE" for event in events):
                    return  # deleted, time is up, or the stream ended: ask the store again
                # The holder renewing (a PUT): keep waiting.
        finally:
            watch.close()

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self._backend.client.run(self.leaving(acquired, reachable))

    def leaving(self, acquired: bool, reachable: bool) -> Steps[None]:
        """:meth:`close`'s requests: leave the queue, and give back the unused lease."""
        if self._closed:
            return
        self._closed = True
        backend = self._backend
        # A winning transaction deleted our queue entry already.
        yield from backend.queue.closed(
            self._key,
            self._owner,
            self.queued_at is not None or self.join_in_flight,
            acquired,
            reachable,
        )
        if not acquired and self.lease is not None:
            yield from backend.leases.revoke(self.lease.id, reachable=reachable)
        if self._spare is not None:
            yield from backend.leases.revoke(self._spare.id, reachable=reachable)
