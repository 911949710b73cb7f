"""``memory://[NAME]``: locks among the threads of one process (tests, single-process apps).

Every ``LockKit`` in the process that names the same store shares its locks (the store is
:mod:`~lockkit_core.backends.memory_store`'s). Waiters sleep on a condition variable of their
key and are woken on release; ``fair=True`` serves them in arrival order.

A key costs memory only while it is held or waited for: its entry goes when it is free and
nobody waits, and leases that expire unreleased are swept in amortised constant time. Fencing
tokens come from one counter per store, so a key's tokens keep rising when its entry is
dropped and made again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import math
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from ..py310 import wait_at_most
from ..url import LockURL
from .aio import AsyncOps, AsyncWaiter, LocalOps
from .base import Backend, Capability, Grade, Grant, Lease, Waiter, owner_hint
from .memory_store import SWEEP_AT, Entry, MemoryStore, store_named

__all__ = ["MemoryBackend"]


class _MemoryWaiter(Waiter):
    """A waiter on one key. It pins the key's entry and remembers the entry's ``changes`` as
    of registration, then as of each return from ``wait()``: both come before the caller's
    next attempt, so a release after that attempt is seen even if it came before ``wait()``."""

    def __init__(self, store: MemoryStore, key: str, owner: str, fair: bool) -> None:
        self._store = store
        self._key = key
        self._owner = owner
        self._fair = fair
        self._closed = False
        with store.lock:
            entry = store.entries.get(key) or store.add(key, time.monotonic())
            entry.waiters += 1
            if entry.cond is None:
                entry.cond = threading.Condition(store.lock)
            if fair:
                entry.queue.append(owner)
            self._entry = entry
            self._seen = entry.changes

    def wait(self, timeout: float) -> Grant | None:
        entry = self._entry
        with self._store.lock:
            if entry.changes == self._seen and timeout > 0:
                assert entry.cond is not None
                entry.cond.wait_for(lambda: entry.changes != self._seen, timeout)
            self._seen = entry.changes
        return None

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        # The store is this process's memory: always reachable, nothing handed over to return.
        store, entry = self._store, self._entry
        with store.lock:
            if self._closed:
                return
            self._closed = True
            entry.waiters -= 1
            now = time.monotonic()
            if self._fair and self._owner in entry.queue:
                was_first = entry.queue[0] == self._owner
                entry.queue.remove(self._owner)
                if was_first:
                    store.freed(self._key, entry, now)  # the next in line may take a free key
                    return
            store.settle(self._key, entry, now)


class _AsyncMemoryWaiter(AsyncWaiter):
    """A :class:`_MemoryWaiter`'s registration, waited on with an ``asyncio.Event`` that a
    release (from any thread or task) sets through its loop's ``call_soon_threadsafe``."""

    def __init__(self, store: MemoryStore, key: str, owner: str, fair: bool) -> None:
        loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._registration = _MemoryWaiter(store, key, owner, fair)
        self._wake = functools.partial(_wake_up, loop, self._event)
        with store.lock:
            self._registration._entry.wakers.add(self._wake)

    async def wait(self, timeout: float) -> Grant | None:
        registration = self._registration
        entry = registration._entry
        with registration._store.lock:
            if entry.changes != registration._seen or timeout <= 0:
                registration._seen = entry.changes
                return None
            # Cleared under the store's lock: a release after this sets it again.
            self._event.clear()
        await wait_at_most(self._event.wait(), timeout)
        return registration.wait(0.0)  # notes the change, without waiting

    async def close(self, acquired: bool, *, reachable: bool = True) -> None:
        registration = self._registration
        with registration._store.lock:
            registration._entry.wakers.discard(self._wake)
        registration.close(acquired, reachable=reachable)


def _wake_up(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
    with contextlib.suppress(RuntimeError):  # its loop was closed: nobody is waiting
        loop.call_soon_threadsafe(event.set)


class _MemoryOps(LocalOps):
    """memory:// on an event loop: every operation is in-process and brief."""

    def __init__(self, backend: MemoryBackend) -> None:
        super().__init__(backend)
        self._store = backend._store

    async def waiter(self, key: str, owner: str, fair: bool) -> AsyncWaiter:
        return _AsyncMemoryWaiter(self._store, key, owner, fair)


class MemoryBackend(Backend):
    """Process-local store; a lock here means nothing to another process."""

    schemes: ClassVar[tuple[str, ...]] = ("memory",)
    capabilities: ClassVar[Capability] = (
        Capability.TTL
        | Capability.FENCING
        | Capability.FAIR
        | Capability.NOTIFY
        | Capability.LIST
        | Capability.HAND_OFF
        | Capability.NO_LEASE
        | Capability.SHARED
    )
    grade: ClassVar[Grade] = Grade.PROCESS
    #: new keys after which expired, unreleased leases are swept (or more, in a larger store)
    SWEEP_AT: ClassVar[int] = SWEEP_AT

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.name = (url.host or "") + url.path
        self._store = store_named(self.name)

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        # No lease (ttl=inf) never expires: the process, and with it the store, ends first.
        store = self._store
        with store.lock:
            now = time.monotonic()
            entry = store.entries.get(key)
            if entry is None:
                entry = store.add(key, now)
            elif entry.held(now):
                if entry.owner == owner:
                    entry.expires = now + ttl
                    return Grant(True, entry.token)
                return Grant(False, retry_after=_left(entry.expires, now))
            elif entry.queue:
                if entry.queue[0] != owner:
                    return Grant(False, retry_after=None)
                entry.queue.popleft()
            store.fence += 1
            entry.owner = owner
            entry.started = time.time()
            entry.expires = now + ttl
            entry.token = store.fence
            return Grant(True, entry.token)

    def release(self, key: str, owner: str) -> bool:
        store = self._store
        with store.lock:
            entry = store.entries.get(key)
            if entry is None:
                return False
            now = time.monotonic()
            if entry.owner != owner or not entry.held(now):
                store.settle(key, entry, now)
                return False
            entry.owner = None
            store.freed(key, entry, now)
            return True

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        return self.adopt(key, owner, ttl).acquired

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        store = self._store
        with store.lock:
            entry = store.entries.get(key)
            now = time.monotonic()
            if entry is None or entry.owner != owner or not entry.held(now):
                return Grant(False)
            entry.expires = now + ttl
            return Grant(True, entry.token)

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        return _MemoryWaiter(self._store, key, owner, fair)

    def try_acquire_shared(self, key: str, owner: str, mode: str, limit: int, ttl: float) -> Grant:
        return self._store.places.try_acquire(_place_key(key, mode), owner, mode, limit, ttl)

    def release_shared(self, key: str, owner: str, mode: str) -> bool:
        return self._store.places.release(_place_key(key, mode), owner)

    def extend_shared(self, key: str, owner: str, mode: str, ttl: float) -> bool:
        return self._store.places.adopt(_place_key(key, mode), owner, ttl).acquired

    def adopt_shared(self, key: str, owner: str, mode: str, ttl: float) -> Grant:
        return self._store.places.adopt(_place_key(key, mode), owner, ttl)

    def shared_waiter(self, key: str, owner: str, mode: str, limit: int) -> Waiter:
        return self._store.places.waiter(_place_key(key, mode), owner, mode)

    def shared_holders(self, key: str, mode: str, limit: int) -> list[Lease]:
        places = self._store.places.holders(_place_key(key, mode), mode, limit)
        return [dataclasses.replace(lease, key=key) for lease in places]

    def aio(self) -> AsyncOps:
        """Operations run inline (in-process and brief); waiters await an event."""
        return _MemoryOps(self)

    def _lease(self, key: str, entry: Entry, now: float) -> Lease:
        assert entry.owner is not None
        return Lease(
            key,
            owner_hint(entry.owner),
            entry.token,
            _left(entry.expires, now),
            "this process",
            started=entry.started,
            waiters=entry.waiters,
        )

    def list(self, prefix: str) -> list[Lease]:
        with self._store.lock:
            now = time.monotonic()
            return [
                self._lease(key, entry, now)
                for key, entry in sorted(self._store.entries.items())
                if key.startswith(prefix) and entry.held(now)
            ]

    def info(self, key: str) -> Lease | None:
        with self._store.lock:
            now = time.monotonic()
            entry = self._store.entries.get(key)
            return self._lease(key, entry, now) if entry is not None and entry.held(now) else None

    def force_release(self, key: str) -> bool:
        store = self._store
        with store.lock:
            entry = store.entries.get(key)
            if entry is None:
                return False
            now = time.monotonic()
            if not entry.held(now):
                store.settle(key, entry, now)
                return False
            entry.owner = None
            store.freed(key, entry, now)
            return True


def _left(expires: float, now: float) -> float | None:
    """Seconds left of a lease; None for a lock held without one."""
    return None if math.isinf(expires) else expires - now


def _place_key(key: str, mode: str) -> str:
    """A read-write lock's places (read and write) and a semaphore's live apart."""
    return ("s:" if mode == "slot" else "rw:") + key
