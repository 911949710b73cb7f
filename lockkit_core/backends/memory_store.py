"""``MemoryStore``: the entries of one ``memory://NAME`` store, kept per process across forks."""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import process
from .memory_shared import MemoryPlaces

__all__ = ["SWEEP_AT", "Entry", "MemoryStore", "store_named"]

#: the fewest new entries between two sweeps for expired, unreleased leases
SWEEP_AT = 1024


@dataclass(eq=False)
class Entry:
    """One key's state: its holder, its waiters, and how often it was freed."""

    owner: str | None = None
    expires: float = 0.0
    started: float = 0.0  #: when the owner got it (time.time(), for the admin views)
    token: int = 0
    #: bumped whenever the key may have become free to a waiter (release, force-release,
    #: the head of the queue leaving); a waiter that saw another value must not sleep
    changes: int = 0
    waiters: int = 0
    cond: threading.Condition | None = None
    #: how to wake the asyncio waiters (each schedules its wake-up on its own event loop)
    wakers: set[Callable[[], None]] = field(default_factory=set)
    queue: deque[str] = field(default_factory=deque)

    def held(self, now: float) -> bool:
        return self.owner is not None and now < self.expires

    def idle(self, now: float) -> bool:
        """Free and unwatched: nothing would notice the entry going."""
        return self.waiters == 0 and not self.held(now)


class MemoryStore:
    """The entries of one ``memory://NAME``; every method runs with ``lock`` held."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[str, Entry] = {}
        #: the last token granted on any key: tokens of one key rise because all of them do
        self.fence = 0
        self.added = 0  #: entries made since the last sweep
        #: the places of its read-write locks and semaphores
        self.places = MemoryPlaces(self)

    def add(self, key: str, now: float) -> Entry:
        # A sweep visits every entry, so it runs once per that many additions (and at least
        # SWEEP_AT): amortised O(1) per new key, and an expired lease outlives its expiry by
        # at most that many additions.
        self.added += 1
        if self.added >= max(SWEEP_AT, len(self.entries)):
            self.sweep(now)
        entry = self.entries[key] = Entry()
        return entry

    def sweep(self, now: float) -> None:
        idle = [key for key, entry in self.entries.items() if entry.idle(now)]
        for key in idle:
            del self.entries[key]
        self.added = 0

    def freed(self, key: str, entry: Entry, now: float) -> None:
        """Tell waiters ``key`` may be free, and drop its entry if nobody is left to care."""
        entry.changes += 1
        if entry.cond is not None and entry.waiters:
            entry.cond.notify_all()
        for wake in entry.wakers:
            wake()
        self.settle(key, entry, now)

    def settle(self, key: str, entry: Entry, now: float) -> None:
        if entry.idle(now) and self.entries.get(key) is entry:
            del self.entries[key]

    def forget_waiters(self) -> None:
        """In a forked child: the waiting threads stayed in the parent, so nobody waits."""
        now = time.monotonic()
        for key, entry in list(self.entries.items()):
            entry.waiters = 0
            entry.cond = None
            entry.wakers.clear()
            entry.queue.clear()
            entry.changes += 1
            self.settle(key, entry, now)
        self.places.forget_waiters()


_stores: dict[str, MemoryStore] = {}
_stores_lock = [threading.Lock()]  # a list: replaced in place in a forked child


def store_named(name: str) -> MemoryStore:
    """The store of ``memory://NAME`` in this process, made on first use."""
    # Stores are kept for the life of the process: an empty one costs a few hundred bytes, and
    # its fence counter is what keeps tokens rising for a kit made later under the same name.
    with _stores_lock[0]:
        return _stores.setdefault(name, MemoryStore())


# A fork copies the stores but only the forking thread: hold every store's lock across the
# fork so that the child's copy is never locked by a thread it does not have, nor caught
# half-way through an update. A fork made below Python runs none of these hooks: the child
# then gets locks of its own and forgets its parent's waiters when it first acquires
# (lockkit_core.process.after_fork).
_held_across_fork: list[threading.Lock] = []


def _before_fork() -> None:
    _stores_lock[0].acquire()
    held = [store.lock for store in _stores.values()]
    for lock in held:
        lock.acquire()
    _held_across_fork[:] = [_stores_lock[0], *held]


def _release_held() -> None:
    held, _held_across_fork[:] = list(_held_across_fork), []
    for lock in reversed(held):
        lock.release()


def _after_fork_in_child() -> None:
    _release_held()
    for store in _stores.values():
        store.forget_waiters()


def _after_fork_without_hooks() -> None:
    # Run in every child (after the hooks above where Python forked, harmlessly): a lock the
    # parent's other threads held at a fork made below Python would stay locked for ever.
    _stores_lock[0] = threading.Lock()
    for store in _stores.values():
        store.lock = threading.Lock()
        store.forget_waiters()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_release_held,
        after_in_child=_after_fork_in_child,
    )
process.after_fork(_after_fork_without_hooks)
