"""``memory://[NAME]``: locks among the threads of one process (tests, single-process apps).

Every ``LockKit`` in the process that names the same store shares its locks. Waiters sleep on
a condition variable and are woken on release; ``fair=True`` serves them in arrival order.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..url import LockURL
from .base import Backend, Capability, Grade, Grant, Lease, Waiter

__all__ = ["MemoryBackend"]


@dataclass
class _Entry:
    owner: str | None = None
    expires: float = 0.0
    token: int = 0
    queue: deque[str] = field(default_factory=deque)

    def held(self, now: float) -> bool:
        return self.owner is not None and now < self.expires


class _Store:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.entries: dict[str, _Entry] = {}


_stores: dict[str, _Store] = {}
_stores_lock = threading.Lock()


def _store(name: str) -> _Store:
    with _stores_lock:
        return _stores.setdefault(name, _Store())


class _MemoryWaiter(Waiter):
    def __init__(self, backend: MemoryBackend, key: str, owner: str, fair: bool) -> None:
        self._store = backend._store
        self._key = key
        self._owner = owner
        self._fair = fair
        if fair:
            with self._store.cond:
                self._store.entries.setdefault(key, _Entry()).queue.append(owner)

    def wait(self, timeout: float) -> Grant | None:
        with self._store.cond:
            self._store.cond.wait(timeout)
        return None

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        if not self._fair:
            return
        with self._store.cond:
            entry = self._store.entries.get(self._key)
            if entry is not None and self._owner in entry.queue:
                entry.queue.remove(self._owner)
                self._store.cond.notify_all()


class MemoryBackend(Backend):
    """Process-local store; a lock here means nothing to another process."""

    schemes: ClassVar[tuple[str, ...]] = ("memory",)
    capabilities: ClassVar[Capability] = (
        Capability.TTL | Capability.FENCING | Capability.FAIR | Capability.NOTIFY | Capability.LIST
    )
    grade: ClassVar[Grade] = Grade.PROCESS

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.name = (url.host or "") + url.path
        self._store = _store(self.name)

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        store = self._store
        with store.cond:
            now = time.monotonic()
            entry = store.entries.setdefault(key, _Entry())
            if entry.owner == owner and entry.held(now):
                entry.expires = now + ttl
                return Grant(True, entry.token)
            if entry.held(now):
                assert entry.owner is not None
                return Grant(False, retry_after=entry.expires - now)
            if entry.queue and entry.queue[0] != owner:
                return Grant(False, retry_after=None)
            if entry.queue:
                entry.queue.popleft()
            entry.owner = owner
            entry.expires = now + ttl
            entry.token += 1
            return Grant(True, entry.token)

    def release(self, key: str, owner: str) -> bool:
        store = self._store
        with store.cond:
            entry = store.entries.get(key)
            if entry is None or entry.owner != owner or not entry.held(time.monotonic()):
                return False
            entry.owner = None
            store.cond.notify_all()
            return True

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        with self._store.cond:
            entry = self._store.entries.get(key)
            now = time.monotonic()
            if entry is None or entry.owner != owner or not entry.held(now):
                return False
            entry.expires = now + ttl
            return True

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        return _MemoryWaiter(self, key, owner, fair)

    def _lease(self, key: str, entry: _Entry, now: float) -> Lease:
        assert entry.owner is not None
        return Lease(key, entry.owner[:8], entry.token, entry.expires - now, "this process")

    def list(self, prefix: str) -> list[Lease]:
        with self._store.cond:
            now = time.monotonic()
            return [
                self._lease(key, entry, now)
                for key, entry in sorted(self._store.entries.items())
                if key.startswith(prefix) and entry.held(now)
            ]

    def info(self, key: str) -> Lease | None:
        with self._store.cond:
            now = time.monotonic()
            entry = self._store.entries.get(key)
            return self._lease(key, entry, now) if entry is not None and entry.held(now) else None

    def force_release(self, key: str) -> bool:
        with self._store.cond:
            entry = self._store.entries.get(key)
            if entry is None or not entry.held(time.monotonic()):
                return False
            entry.owner = None
            self._store.cond.notify_all()
            return True
