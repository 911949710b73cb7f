"""Read-write locks and semaphores of ``memory://``: places held as leases, queued FIFO.

Each key has its holders (owner -> mode, lease end, token) and its queue of waiters (owner ->
mode, oldest first). An attempt takes a place when :func:`lockkit_core.places.admitted` lets
its owner in: a queued owner in its turn, an owner without a waiter only if nobody is queued
ahead of a place it could take. A place freed (released, expired, a waiter leaving) wakes the
key's waiters, which ask again; leases that ran out are dropped whenever the key is looked at.
Fencing tokens come from the memory store's counter, as plain locks' do.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..places import admitted
from .base import Grant, Lease, Waiter, owner_hint

if TYPE_CHECKING:
    from .memory_store import MemoryStore

__all__ = ["MemoryPlaces"]


@dataclass
class _Place:
    mode: str
    expires: float
    token: int


@dataclass(eq=False)
class _Key:
    holders: dict[str, _Place] = field(default_factory=dict)
    queue: dict[str, str] = field(default_factory=dict)  # owner -> mode, oldest first
    changes: int = 0
    cond: threading.Condition | None = None

    def expire(self, now: float) -> bool:
        gone = [owner for owner, place in self.holders.items() if place.expires <= now]
        for owner in gone:
            del self.holders[owner]
        return bool(gone)


class MemoryPlaces:
    """The places of one memory store; every method takes the store's lock."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.keys: dict[str, _Key] = {}

    def _key(self, key: str) -> _Key:
        found = self.keys.get(key)
        if found is None:
            found = self.keys[key] = _Key(cond=threading.Condition(self.store.lock))
        return found

    def _changed(self, key: str, entry: _Key) -> None:
        entry.changes += 1
        assert entry.cond is not None
        entry.cond.notify_all()
        self._settle(key, entry)

    def _settle(self, key: str, entry: _Key) -> None:
        if not entry.holders and not entry.queue and self.keys.get(key) is entry:
            del self.keys[key]  # a free key costs nothing

    def try_acquire(self, key: str, owner: str, mode: str, limit: int, ttl: float) -> Grant:
        with self.store.lock:
            now = time.monotonic()
            entry = self._key(key)
            if entry.expire(now):
                self._changed(key, entry)
                entry = self._key(key)
            place = entry.holders.get(owner)
            if place is not None:
                place.expires = now + ttl
                return Grant(True, place.token)
            queue = list(entry.queue.items())
            if owner not in entry.queue:
                queue.append((owner, mode))  # looks as if at the tail; joins only by a waiter
            holding = [p.mode for p in entry.holders.values()]
            if owner not in admitted(holding, queue, limit):
                left = [p.expires - now for p in entry.holders.values()]
                finite = [s for s in left if not math.isinf(s)]
                self._settle(key, entry)
                return Grant(False, retry_after=min(finite) if finite else None)
            entry.queue.pop(owner, None)
            self.store.fence += 1
            entry.holders[owner] = _Place(mode, now + ttl, self.store.fence)
            # Readers queued right behind may come in beside this one: let them ask.
            self._changed(key, entry)
            return Grant(True, self.store.fence)

    def release(self, key: str, owner: str) -> bool:
        with self.store.lock:
            entry = self.keys.get(key)
            if entry is None:
                return False
            place = entry.holders.pop(owner, None)
            alive = place is not None and place.expires > time.monotonic()
            self._changed(key, entry)
            return alive

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        with self.store.lock:
            entry = self.keys.get(key)
            now = time.monotonic()
            place = None if entry is None else entry.holders.get(owner)
            if place is None or place.expires <= now:
                return Grant(False)
            place.expires = now + ttl
            return Grant(True, place.token)

    def holders(self, key: str, mode: str, limit: int) -> list[Lease]:
        with self.store.lock:
            entry = self.keys.get(key)
            if entry is None:
                return []
            now = time.monotonic()
            return [
                Lease(
                    key,
                    owner_hint(owner),
                    place.token,
                    None if math.isinf(place.expires) else place.expires - now,
                    (
                        "writer"
                        if place.mode == "write"
                        else "reader"
                        if place.mode == "read"
                        else "holder"
                    )
                    + ": this process",
                )
                for owner, place in sorted(entry.holders.items(), key=lambda i: i[1].token)
                if place.expires > now
            ]

    def waiter(self, key: str, owner: str, mode: str) -> Waiter:
        return _PlaceWaiter(self, key, owner, mode)

    def forget_waiters(self) -> None:
        """In a forked child: the waiting threads stayed in the parent."""
        for key, entry in list(self.keys.items()):
            entry.queue.clear()
            entry.cond = threading.Condition(self.store.lock)
            self._settle(key, entry)


class _PlaceWaiter(Waiter):
    """Queued for a place; woken whenever the key's places change, then asks again."""

    def __init__(self, places: MemoryPlaces, key: str, owner: str, mode: str) -> None:
        self._places = places
        self._key = key
        self._owner = owner
        with places.store.lock:
            entry = places._key(key)
            entry.queue[owner] = mode
            self._entry = entry
            self._seen = entry.changes

    def wait(self, timeout: float) -> Grant | None:
        entry = self._entry
        with self._places.store.lock:
            if entry.changes == self._seen and timeout > 0:
                assert entry.cond is not None
                entry.cond.wait_for(lambda: entry.changes != self._seen, timeout)
            self._seen = entry.changes
        return None

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        places, entry = self._places, self._entry
        with places.store.lock:
            if entry.queue.pop(self._owner, None) is not None:
                places._changed(self._key, entry)  # those behind may go in now
