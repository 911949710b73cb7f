"""``WaitQueue``: this backend's waiters, the short lease their queue entries live on, and the
entries left behind in an outage (see :mod:`.waiter` for how a waiter uses its place)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ..base import owner_id
from .client import Call, Join, Steps, b64
from .layout import LeaseRef, queue_entry
from .leases import Leases

if TYPE_CHECKING:
    from .waiter import EtcdWaiter

__all__ = ["QUEUE_RENEW", "QUEUE_TTL", "STALE_MAX", "WaitQueue"]

#: the lease (seconds, about) of the queue entries, kept alive while anyone here waits
QUEUE_TTL = 3
#: renew the queue lease when less than this is left of it
QUEUE_RENEW = 2.0
#: queue entries left in an outage that are remembered for deletion
STALE_MAX = 100


class WaitQueue:
    """The waiters of one backend, and the one queue lease they share."""

    def __init__(self, leases: Leases) -> None:
        self._leases = leases
        self._lock = threading.Lock()
        #: the queue lease's grant while it is on its way (callers meanwhile join it)
        self._granting: Future[LeaseRef | None] | None = None
        self._lease: LeaseRef | None = None
        self._waiters: dict[tuple[str, str], EtcdWaiter] = {}
        #: queue entries of waiters that left during an outage, deleted by the next attempt
        self._stale: list[str] = []

    def register(self, key: str, owner: str, waiter: EtcdWaiter) -> None:
        with self._lock:
            self._waiters[(key, owner)] = waiter

    def get(self, key: str, owner: str) -> EtcdWaiter | None:
        """The waiter of ``owner`` on ``key``, if it waits."""
        return self._waiters.get((key, owner))

    @property
    def has_lease(self) -> bool:
        """True while this backend holds a queue lease (its waiters waited lately)."""
        return self._lease is not None

    def lease(self) -> Steps[LeaseRef]:
        """The queue lease, granted when first needed, renewed when it runs low.

        One lease serves every waiter here, granted once: callers that need it while it is
        being granted join that grant (:class:`~.client.Join`) rather than hold a lock across
        the request, which an asyncio waiter could not do."""
        lease = self._lease
        if lease is not None and (
            lease.left() >= QUEUE_RENEW or (yield from self._leases.keep_alive(lease))
        ):
            return lease
        mine: Future[LeaseRef | None] = Future()
        mine.set_running_or_notify_cancel()  # a joiner that leaves cannot cancel it
        with self._lock:
            pending = self._granting
            if pending is None:
                self._granting = mine
        if pending is not None:
            joined: LeaseRef | None = yield Join(pending)
            if joined is not None:
                return joined
            return (yield from self.lease())  # that grant failed: ours to try
        granted: LeaseRef | None = None
        try:
            granted = yield from self._leases.grant(QUEUE_TTL - 2)
            with self._lock:
                self._lease = granted
            return granted
        finally:
            with self._lock:
                self._granting = None
            mine.set_result(granted)

    def drop_lease(self) -> None:
        """Forget the queue lease (it was revoked under us)."""
        with self._lock:
            self._lease = None

    def alive(self, lease_id: int) -> Steps[bool]:
        """Renew the queue lease if it runs low; False if ``lease_id`` is not it any more
        (it expired, or an outage dropped it: entries under it are gone)."""
        lease = self._lease
        if lease is None or lease.id != lease_id:
            return False
        if lease.left() >= QUEUE_RENEW or (yield from self._leases.keep_alive(lease)):
            return True
        with self._lock:
            if self._lease is lease:
                self._lease = None
        return False

    def take_stale(self) -> list[str]:
        """Entries to delete with the next attempt (each is handed out once)."""
        with self._lock:
            stale, self._stale = self._stale, []
        return stale

    def closed(
        self, key: str, owner: str, queued: bool, acquired: bool, reachable: bool
    ) -> Steps[None]:
        """A waiter is done: leave the queue, and revoke the queue lease with the last
        waiter that gives up (one that got the lock leaves it to the next, or to expire)."""
        entry = queue_entry(key, owner_id(owner))
        with self._lock:
            self._waiters.pop((key, owner), None)
            # A waiter whose joining attempt is on its way counts: revoking the queue lease
            # under it fails its attempt ('requested lease not found').
            last = not any(
                w.queued_at is not None or w.join_in_flight for w in self._waiters.values()
            )
            lease = self._lease
            if not reachable or (last and not acquired):
                self._lease = None  # nobody renews it any more
            if not reachable and queued:
                self._stale = [*self._stale[-STALE_MAX + 1 :], entry]
        if not reachable:
            return
        if last and not acquired and lease is not None:
            yield from self._leases.revoke(lease.id)  # our entry goes with it
        elif queued and not acquired:
            yield Call("kv/deleterange", {"key": b64(entry)}, f"leave {key!r}'s queue")

    def reset(self) -> None:
        """In a forked child: the waiting threads stayed in the parent."""
        self._lease = None
        self._waiters.clear()
        self._stale = []

    def close(self) -> None:
        """Revoke the queue lease, if any."""
        lease, self._lease = self._lease, None
        if lease is not None:
            self._leases.client.run(self._leases.revoke(lease.id))
