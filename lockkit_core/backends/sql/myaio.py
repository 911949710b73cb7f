"""``mysql://`` on an event loop: the blocking statements on a few threads, the waiting on the loop.

PyMySQL has no asyncio API (and no well-kept async driver is among our dependencies), so each
operation (one short statement or multi-statement, bounded by the socket timeout) runs on the
backend's :class:`~..aio.Executor`: a few threads per kit, as many as the pool keeps idle
connections, never one per call or per waiter. A caller cancelled meanwhile waits for its
statement to end and is then cancelled, so a grant it made is given back after it was made,
never before (see :class:`~..aio.ExecutorOps`).

Waiting mirrors the blocking waiting room (:mod:`.mywait`) without a connection per waiter:
the waiters of one key on one loop stand in a :class:`Room`, in arrival order. The first
backs off and tries (0.5 ms to 50 ms, and every wait bounded by the holder's lease), the
others wait their turn on the loop, sending nothing; a waiter that leaves (it got the lock,
timed out or was cancelled) passes the turn on. A release made on this loop wakes the key's
first waiter at once. The room only orders waiters: the lease table alone decides who holds
the lock.
"""

from __future__ import annotations

import asyncio
from collections import deque

from ...py310 import wait_at_most
from ..aio import AsyncWaiter, Executor, ExecutorOps
from ..base import Backend, Grant, SleepWaiter

__all__ = ["MyOps", "Room", "RoomWaiter"]


class Room:
    """The asyncio waiters of one key on one loop: their turns in arrival order (the first is
    done: that waiter looks at the store), and a flag a release on this loop raises."""

    def __init__(self) -> None:
        self.turns: deque[asyncio.Future[None]] = deque()
        self.released = asyncio.Event()


class RoomWaiter(AsyncWaiter):
    """Takes its place in the key's room when made (before the attempt it precedes); in
    :meth:`wait`, waits for its turn, or at the head backs off until a look is due or a
    release on this loop wakes it."""

    def __init__(self, rooms: dict[str, Room], key: str) -> None:
        self._rooms = rooms
        self._key = key
        room = rooms.get(key)
        if room is None:
            room = rooms[key] = Room()
        self._room = room
        self._turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not room.turns:
            self._turn.set_result(None)
        room.turns.append(self._turn)
        self._backoff = SleepWaiter()

    async def wait(self, timeout: float) -> Grant | None:
        if not self._turn.done():
            # shielded: a timeout must not cancel the turn, which stays ours in the queue
            await wait_at_most(asyncio.shield(self._turn), timeout)
            return None  # at the head now (the key may be free), or the wait is over: look
        await wait_at_most(self._room.released.wait(), self._backoff.next_delay(timeout))
        self._room.released.clear()
        return None

    async def close(self, acquired: bool, *, reachable: bool = True) -> None:
        """Leave the room, and pass the turn on if it was ours (safe after a cancellation)."""
        turns = self._room.turns
        if self._turn not in turns:
            return
        first = turns[0] is self._turn
        turns.remove(self._turn)
        if not self._turn.done():
            self._turn.cancel()
        if first and turns:
            turns[0].set_result(None)
        if not turns and self._rooms.get(self._key) is self._room:
            del self._rooms[self._key]


class MyOps(ExecutorOps):
    """One loop's operations on a ``mysql://`` backend; see the module docstring."""

    def __init__(self, backend: Backend, executor: Executor) -> None:
        super().__init__(backend, executor)
        #: the rooms of the keys someone on this loop waits for
        self.rooms: dict[str, Room] = {}

    async def release(self, key: str, owner: str) -> bool:
        released = await super().release(key, owner)
        room = self.rooms.get(key)
        if room is not None:
            room.released.set()  # the first waiter looks now, not after its backoff
        return released

    async def waiter(self, key: str, owner: str, fair: bool) -> AsyncWaiter:
        return RoomWaiter(self.rooms, key)
