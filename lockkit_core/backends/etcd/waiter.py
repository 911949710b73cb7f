"""``EtcdWaiter``: a lease granted ahead of the attempts, a queue entry for ``fair=True``, and
a watch on the key (or on the fair waiter's predecessor) instead of polling.

The waiter's lease is the one its attempts put under the record, so when the key frees the
next attempt is one transaction. A fair waiter's queue entry lives on a short lease of its
own that the waiting thread keeps alive: a waiter whose process dies leaves the queue within
that short lease (``QUEUE_TTL``), not within the lock's ttl. Each ``wait()`` watches from the
revision the last attempt saw, so a delete that came in between is replayed at once, and is
at most ``WAIT_SLICE`` long, so a watch on a member that went silent costs at most that.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..base import Grant, Waiter, owner_id
from .client import b64, unb64
from .layout import LeaseRef, lock_key, queue_entry
from .watch import Watch

if TYPE_CHECKING:
    from .backend import EtcdBackend

__all__ = ["QUEUE_TTL", "WAIT_SLICE", "EtcdWaiter"]

#: the lease (seconds) of a fair waiter's queue entry, kept alive while it waits
QUEUE_TTL = 2
#: the longest one wait() watches before the caller asks the store again
WAIT_SLICE = 1.0


class EtcdWaiter(Waiter):
    """One caller's registration on one key; see the module docstring."""

    def __init__(self, backend: EtcdBackend, key: str, owner: str, fair: bool) -> None:
        self._backend = backend
        self._key = key
        self._owner = owner
        self._fair = fair
        self.lease: LeaseRef | None = None
        self._queue_lease: LeaseRef | None = None
        #: the create revision of our queue entry (fair), None when not queued
        self.queued_at: int | None = None
        self._revision = 0  #: the store's revision as of the last attempt
        self._predecessor: str | None = None
        self._closed = False
        if fair:
            self._enqueue()

    def lock_lease(self, ttl: float) -> LeaseRef:
        """The lease the next attempt puts under the record, granted on first use."""
        if self.lease is None:
            self.lease = self._backend.grant(ttl)
        return self.lease

    def _enqueue(self) -> None:
        backend = self._backend
        if self._queue_lease is not None:
            backend.revoke(self._queue_lease.id)
        self._queue_lease = lease = backend.grant(QUEUE_TTL - 1.0)
        entry = queue_entry(self._key, owner_id(self._owner))
        answer = backend.client.call(
            "kv/put", {"key": b64(entry), "value": b64(""), "lease": lease.id},
            f"queue for {self._key!r}",
        )
        self.queued_at = int(answer["header"]["revision"])
        self._predecessor = None

    def observed(self, revision: int, fair_ranges: list[dict[str, Any]] | None) -> None:
        """What a failed attempt saw: the revision, and for a fair waiter its own entry and
        the entry just before it."""
        self._revision = revision
        if fair_ranges is None:
            return
        if not fair_ranges[0].get("kvs"):
            self.queued_at = None  # our entry expired (we were paused): queue again
            return
        before = fair_ranges[1].get("kvs") or []
        self._predecessor = unb64(before[0]["key"]) if before else None

    def wait(self, timeout: float) -> Grant | None:
        timeout = min(timeout, WAIT_SLICE)
        deadline = time.monotonic() + timeout
        backend = self._backend
        if self._fair and self.queued_at is None:
            self._enqueue()
            return None  # try again from our new place
        queue_lease = self._queue_lease
        if (
            queue_lease is not None
            and queue_lease.left() < QUEUE_TTL / 2
            and not backend.keep_alive(queue_lease)
        ):
            self.queued_at = None
            return None
        if timeout <= 0:
            return None
        watched = self._predecessor or lock_key(self._key)
        watch = Watch(backend.client, watched, self._revision + 1, timeout)
        try:
            if watch.broken:  # no member took the watch: wait as a fallback would
                time.sleep(max(0.0, min(0.05, deadline - time.monotonic())))
                return None
            while True:
                remaining = deadline - time.monotonic()
                events = watch.next_events(remaining) if remaining > 0 else []
                if not events:
                    return None  # time is up, or the stream ended: ask the store again
                if any(event.get("type") == "DELETE" for event in events):
                    return None
                # A holder renewing (a PUT): keep waiting.
        finally:
            watch.close()

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        backend = self._backend
        backend.forget_waiter(self._key, self._owner)
        if self._queue_lease is not None:
            backend.revoke(self._queue_lease.id, reachable=reachable)
        if not acquired and self.lease is not None:
            backend.revoke(self.lease.id, reachable=reachable)
