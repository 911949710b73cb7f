"""``waiting_for_places()``: how many contenders wait in the store for a place of a read-write
lock or a semaphore, read from the store itself (memory, file, Redis, ZooKeeper), so that a
test waits for a waiter to have queued (with :func:`polling.wait_until`) instead of sleeping
for a guess of how long queueing takes."""

from __future__ import annotations

import json
from typing import cast

from lockkit_core import LockKit
from lockkit_core.backends.file.backend import FileBackend
from lockkit_core.backends.memory import MemoryBackend, _place_key
from lockkit_core.backends.redis.backend import RedisBackend
from lockkit_core.backends.redis.shared import place_keys
from lockkit_core.backends.zookeeper.backend import ZooKeeperBackend
from lockkit_core.backends.zookeeper.shared import _holding
from lockkit_core.keys import namespaced

__all__ = ["waiting_for_places"]


def waiting_for_places(kit: LockKit, key: str, mode: str = "read", limit: int = 0) -> int:
    """The waiters queued for ``key``'s places: ``mode="slot"`` (and its ``limit``) for a
    semaphore, any other mode for a read-write lock (whose readers and writers share a queue)."""
    full = namespaced(kit.namespace, key)
    backend = kit.backend
    if isinstance(backend, MemoryBackend):
        store = backend._store
        with store.lock:
            entry = store.places.keys.get(_place_key(full, mode))
            return 0 if entry is None else len(entry.queue)
    if isinstance(backend, FileBackend):
        try:
            with open(backend.places._path(full, mode), "rb") as file:
                raw = file.read()
        except FileNotFoundError:
            return 0
        # Read without the file's flock: a write caught halfway reads as nobody yet, and the
        # caller polls again.
        try:
            return len(json.loads(raw).get("queue", [])) if raw.strip() else 0
        except ValueError:
            return 0
    if isinstance(backend, RedisBackend):
        return int(cast(int, backend.client.zcard(place_keys(full, mode)[2])))
    if isinstance(backend, ZooKeeperBackend):
        shared = backend._shared
        children = shared._children(shared._parent(full, mode))
        return len(children) - len(_holding(children, limit))
    raise TypeError(f"no queue of places to read on {type(backend).__name__}")
