"""The wait queue of ``file://``: entries in the key's record, and the waiter that sits in one.

A blocking caller that finds the key busy joins the queue in the same critical section; a
release (or a takeover of a lapsed lease) hands the lock straight to the oldest live waiter,
so waiters are served in arrival order and a releaser cannot take the key straight back. An
entry lives twice its waiter's lease unless renewed by that waiter's next attempt, and one
whose process is gone is skipped. The queue holds at most :data:`MAX_QUEUE` entries; later
callers poll until there is room.

A waiter is told of its hand-over by a datagram where it has a bell (:mod:`.wakeups`), and
also reads the record's first line now and then, which is how it notices a holder that died,
a lease that lapsed, or a notice that could not reach it (another network namespace).
Blocking in ``flock`` would not do: no flock is held during a tenure, and a blocking
``flock`` cannot be given a timeout from a library without signals.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Generator
from typing import TYPE_CHECKING

from ...py310 import wait_at_most
from ...sansio import arun, run
from ..aio import AsyncWaiter
from ..base import Grant, SleepWaiter, Waiter
from .record import FREE, Entry, Record, find, owner_id, owns, prune
from .store import RecordStore
from .wakeups import Bell

if TYPE_CHECKING:
    from .backend import FileBackend

#: how often a waiter for a lock without a lease (``ttl=None``) renews its entry: a
#: waiter attempts again within its own lease, and a lease-less one has none to go by
NO_LEASE_REFRESH = 30.0


def refresh(ttl: float) -> float:
    """How long a waiter may go between attempts (its entry lives twice that)."""
    return NO_LEASE_REFRESH if ttl == float("inf") else ttl


#: blocking waiters queued per key (~130 bytes each): bounds the record and each operation on it
MAX_QUEUE = 1024
#: a waiter's first and longest pause between looks, without and with a wake-up socket: the
#: socket makes looks a fallback, for a hand-over whose datagram did not arrive
POLL = (0.0002, 0.005)
POLL_NOTIFIED = (0.01, 0.05)


def join(
    store: RecordStore, rec: Record, mine: bytes, ttl: float, now: float, waiter: FileWaiter
) -> None:
    """Put the caller's entry at the tail of ``rec.queue``, or renew it in place. A full
    queue is left as it is (but for lapsed entries): the caller polls until there is room."""
    line = b"%s %r %r %d %d %s %s\n" % (
        mine,
        now + 2 * refresh(ttl),
        ttl,
        store.pid,
        store.pidns,
        store.host,
        waiter.ring(now),
    )
    queue = rec.queue
    start, end = find(queue, mine)
    if start >= 0:
        rec.queue = queue[:start] + line + queue[end:]
    else:
        if queue.count(b"\n") >= MAX_QUEUE:
            queue = rec.queue = prune(queue, now)
        if queue.count(b"\n") >= MAX_QUEUE:
            waiter.queued = False
            return
        rec.queue = queue + line
    waiter.queued = True


def pop_live(store: RecordStore, rec: Record, now: float) -> Entry | None:
    """Remove and return the oldest entry of ``rec.queue`` whose waiter may be there."""
    queue = rec.queue
    while queue:
        end = queue.index(b"\n") + 1
        line, queue = queue[: end - 1], queue[end:]
        try:
            head = Entry(line)
        except ValueError:
            continue  # not ours to fix, not worth failing for: skip it
        if head.expires > now and not store.gone(head.pid, head.pidns, head.host):
            rec.queue = queue
            return head
    rec.queue = b""
    return None


class FileWaiter(Waiter):
    """A blocking caller on one key: its attempts queue it, and it waits to be handed the
    key, told by a datagram where it has a bell, else by looking at the record.

    A datagram is believed only if it carries the ticket kept in the waiter's entry, which
    only those who may read the record know; its grant is dated from before the entry was
    made (``since``), so a hand-over that lapsed meanwhile is never mistaken for a lease.
    """

    __slots__ = (
        "_backend",
        "_bell",
        "_cap",
        "_delay",
        "_fallback",
        "_ticket",
        "granted",
        "key",
        "owner",
        "queued",
        "queued_at",
        "ttl",
        "wake",
    )

    def __init__(self, backend: FileBackend, key: str, owner: str) -> None:
        self._backend = backend
        self.key = key
        self.owner = owner
        self.ttl = 0.0  # the caller's lease, set before each attempt
        self.queued = False  # the last attempt left an entry in the queue
        self.queued_at: float | None = None  # send time of the first attempt that queued it
        self.granted = False  # an attempt took the key while this was registered
        self.wake = FREE  # kept in the entry: the bell's name and our ticket
        # Taken when first queued: a caller that finds the key free never needs them.
        self._bell: Bell | None = None
        self._ticket = b""
        self._delay = self._cap = 0.0
        self._fallback: SleepWaiter | None = None
        backend._queued[(key, owner)] = self

    def ring(self, now: float) -> bytes:
        """The ``wake`` field of our entry, getting a bell the first time (Linux only)."""
        self._backend.waited_at = now
        if self._delay == 0.0:
            self._bell = self._backend._bells.take()
            if self._bell is not None:
                self._ticket = os.urandom(8).hex().encode("ascii") + b" "
                self.wake = self._bell.name + self._ticket[:-1]
            self._delay, self._cap = POLL if self._bell is None else POLL_NOTIFIED
        return self.wake

    def wait(self, timeout: float) -> Grant | None:
        return run(self.waiting(timeout), self._pause)

    def _pause(self, seconds: float) -> list[bytes]:
        if self._bell is None:
            time.sleep(seconds)
            return []
        return self._bell.wait(seconds)

    def waiting(self, timeout: float) -> Generator[float, list[bytes], Grant | None]:
        """The decisions of one ``wait``, sans I/O (see :mod:`lockkit_core.sansio`): it yields a
        pause, to be spent listening on the bell (or sleeping, without one), and is sent the
        datagrams that arrived meanwhile. ``wait`` runs it blocking, :class:`AsyncFileWaiter`
        on an event loop."""
        if not self.queued:
            # The queue was full: poll, and join at an attempt that finds room.
            if self._fallback is None:
                self._fallback = SleepWaiter()
            yield self._fallback.next_delay(timeout)
            return None
        # Back within our own lease: the next attempt renews the entry, which lives two.
        end = time.monotonic() + min(timeout, refresh(self.ttl))
        # The attempt that queued us has just read the record: pause before the first look.
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            pause = min(left, self._delay)
            self._delay = min(self._cap, self._delay * 2)
            for note in (yield pause):
                if note.startswith(self._ticket) and note[len(self._ticket) :].isdigit():
                    return self._handed(int(note[len(self._ticket) :]))
            done, grant = self._look()
            if done:
                return grant

    def _handed(self, fence: int) -> Grant:
        # As if written by our own attempt: a normal exit marks the record detached.
        self._backend._store.written[self.key] = owner_id(self.owner)
        return Grant(True, fence, since=self.queued_at)

    def _look(self) -> tuple[bool, Grant | None]:
        """Read the record's first line: ``(True, grant)`` if the key was handed to us,
        ``(True, None)`` if an attempt may take it, ``(False, None)`` to keep waiting."""
        backend = self._backend
        store = backend._store
        rec = backend._locked(self.key, False, store.glance)
        if rec is None:
            return True, None  # no file (removed by a temp cleaner): the attempt makes one
        now = time.monotonic()
        if owns(rec.owner, self.owner) and store.current(rec, now):
            if backend._locked(self.key, False, backend._grants.claim, self.owner, rec.fence):
                return True, self._handed(rec.fence)
            return True, None  # lapsed meanwhile: an attempt tells
        return not store.held(rec, now), None

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        """Leave the queue (passing on a lock handed to us if we did not take it). With
        ``reachable=False`` (the store just failed) try once without waiting for another
        process's critical section; an entry left behind lapses by itself."""
        backend = self._backend
        if backend._queued.get((self.key, self.owner)) is self:
            del backend._queued[(self.key, self.owner)]
        if self._bell is not None:
            # Closed unless kept for reuse: a hand-over to an entry we could not remove
            # (reachable=False) then finds no socket, and the key is passed on at once.
            keep = reachable and os.getpid() == backend._store.pid
            backend._bells.give_back(self._bell, keep)
            self._bell = None
        if not acquired and (self.queued_at is not None or self.granted):
            backend._withdraw(self.key, self.owner, patient=reachable)


class AsyncFileWaiter(AsyncWaiter):
    """A :class:`FileWaiter` on an event loop: the same queue entry and decisions, and its
    pauses spent on the loop (the bell's socket is watched with ``loop.add_reader``), so a
    waiter costs no thread."""

    def __init__(self, waiter: FileWaiter) -> None:
        self._waiter = waiter

    async def wait(self, timeout: float) -> Grant | None:
        return await arun(self._waiter.waiting(timeout), self._pause)

    async def _pause(self, seconds: float) -> list[bytes]:
        bell = self._waiter._bell
        if bell is None:
            await asyncio.sleep(seconds)
            return []
        got = bell.drain()
        if got:
            return got
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        fd = bell.sock.fileno()
        loop.add_reader(fd, _settle, ready)
        try:
            if not await wait_at_most(ready, seconds):
                return []
        finally:
            loop.remove_reader(fd)
        return bell.drain()

    async def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self._waiter.close(acquired, reachable=reachable)


def _settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)
