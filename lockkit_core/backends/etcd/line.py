"""``etcd://`` on an event loop: the lock operations, and the line its asyncio waiters of one
key stand in.

The waiters of one key on one loop stand in a :class:`Line`, in the order they asked. Each
takes its place in the key's etcd queue as it asks, many in one transaction (:mod:`.batch`),
so waiters of other processes are served in the order they asked too; but only the first
(the front) tries and watches as a blocking waiter does (:mod:`.waiter`). The others wait
their turn on the loop and send nothing, so a thousand waiting tasks cost a few transactions
and one watch, not a thousand watches re-read every second.

A release made on this loop while the front is first in etcd's queue (or nobody queues)
hands the lock over in place, in one transaction (:mod:`.handover`): the record is rewritten
for the front under the same lease and its queue entry is deleted. The front gets the grant
at once and sends nothing; while a holder of this loop has the key, the front does not
watch: it waits on the loop for that release, and looks at the store once per
:data:`~.waiter.WAIT_SLICE` (a holder that loses its lease without releasing). Anything else
(the front not ready, another process queued first, a lease too short for the front's ttl)
is the usual release, and the front looks at the store at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from ...errors import BackendError
from ...py310 import wait_at_most
from ..aio import AsyncOps, AsyncWaiter
from ..base import Grant
from .aio import AsyncGateway
from .backend import EtcdBackend
from .batch import BATCH_MAX, queueing, unqueueing
from .handover import handing_over
from .waiter import WAIT_SLICE, EtcdWaiter

__all__ = ["TURN_WAIT", "EtcdOps", "Line", "LineWaiter", "Place"]

#: the longest a waiter behind the front waits for its turn before it looks again (on the
#: loop, sending nothing): reaching the front, or a hand-over, wakes it at once
TURN_WAIT = 60.0


class Place:
    """One waiter's place in a line: its store-side waiter, the ttl it asks for, and what a
    release on this loop left for it."""

    def __init__(self, waiter: EtcdWaiter) -> None:
        self.waiter = waiter
        self.ttl: float | None = None  #: known from its first attempt
        #: done when it reaches the front (or is handed the lock)
        self.turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: set by a release on this loop: look at the store now, or take ``granted``
        self.wake = asyncio.Event()
        self.granted: Grant | None = None  #: handed over, not yet taken by the caller
        self.delivered = False  #: a hand-over was taken by the caller
        self.busy = False  #: a request of its own (attempt, watch) is on its way

    @property
    def owner(self) -> str:
        return self.waiter.owner


class Line:
    """The asyncio waiters of one key on one loop, in the order they asked."""

    def __init__(self) -> None:
        self.places: deque[Place] = deque()
        self.by_owner: dict[str, Place] = {}
        #: a hand-over on its way (its places must not leave until it is answered)
        self.handing: asyncio.Future[None] | None = None
        #: a batch of queue entries on its way (the same)
        self.enqueuing: asyncio.Future[None] | None = None
        #: the task that queues the places behind the front in etcd (see :mod:`.batch`)
        self.enqueuer: asyncio.Future[None] | None = None
        #: a batch failed: it is unknown which of its places are queued, so no later place
        #: may be (it would be before them in etcd's queue, and they would wait for it
        #: while it waits for them here); the rest join etcd's queue at the front
        self.enqueue_failed = False

    def busy(self) -> asyncio.Future[None] | None:
        """A request on its way that may change its places' entries, if any."""
        return self.handing or self.enqueuing

    def front(self) -> Place | None:
        return self.places[0] if self.places else None

    def join(self, place: Place) -> None:
        if not self.places:
            place.turn.set_result(None)
        self.places.append(place)
        self.by_owner[place.owner] = place

    def leave(self, place: Place) -> None:
        """Take ``place`` out; the next one reaches the front if it was there."""
        if self.by_owner.pop(place.owner, None) is None:
            return
        first = self.places[0] is place
        self.places.remove(place)
        if first and self.places and not self.places[0].turn.done():
            self.places[0].waiter.reached_front()
            self.places[0].turn.set_result(None)


class EtcdOps(AsyncOps):
    """The lock operations of one :class:`EtcdBackend` on one event loop."""

    def __init__(self, backend: EtcdBackend) -> None:
        self.backend = backend
        self.gateway = AsyncGateway(backend.client)
        self.lines: dict[str, Line] = {}
        #: the owner holding each key through this loop (a release here wakes its line)
        self.holders: dict[str, str] = {}

    def _place(self, key: str, owner: str) -> Place | None:
        line = self.lines.get(key)
        return line.by_owner.get(owner) if line is not None else None

    async def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        place = self._place(key, owner)
        if place is not None:
            place.ttl = ttl
            handed = await self._handed(place)
            if handed is not None:
                return handed
            if not place.turn.done():
                # Someone here asked first and goes first: reaching the front wakes us.
                return Grant(False, retry_after=TURN_WAIT)
            line = self.lines[key]
            while (busy := line.busy()) is not None:  # it may be putting our queue entry
                await asyncio.shield(busy)
            handed = await self._handed(place)
            if handed is not None:
                return handed
            place.wake.clear()  # this look at the store is the one a release asks for
            place.busy = True
        try:
            grant = await self.gateway.run(self.backend.attempt(key, owner, ttl))
        finally:
            if place is not None:
                place.busy = False
        if place is not None:
            line = self.lines[key]
            if not grant.acquired:
                await self._keep_order(key, line, place)
            self._enqueue_soon(key, line)  # those behind it, now that it may be queued
        if grant.acquired:
            self.holders[key] = owner
        return grant

    async def _keep_order(self, key: str, line: Line, front: Place) -> None:
        """If ``front`` is not queued before everyone behind it (see :mod:`.batch`), take
        their entries out: the enqueuer queues them again behind it."""
        while (busy := line.busy()) is not None:
            await asyncio.shield(busy)
        mine = front.waiter.queued_at
        behind = [p.waiter for p in list(line.places)[1:] if p.waiter.queued_at is not None]
        if not behind or (mine is not None and all((w.queued_at or 0) >= mine for w in behind)):
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.enqueuing = done
        try:
            for start in range(0, len(behind), BATCH_MAX):
                await self.gateway.run(unqueueing(key, behind[start : start + BATCH_MAX]))
        except BackendError:
            line.enqueue_failed = True
        finally:
            line.enqueuing = None
            done.set_result(None)

    async def _handed(self, place: Place) -> Grant | None:
        """The grant a release handed ``place`` (once one on its way is answered), if any."""
        line = self.lines.get(place.waiter.key)
        while line is not None and line.handing is not None and place.granted is None:
            await asyncio.shield(line.handing)
        granted, place.granted = place.granted, None
        if granted is not None:
            place.delivered = True
        return granted

    async def release(self, key: str, owner: str) -> bool:
        if self.holders.get(key) == owner:
            del self.holders[key]
        mine = self._place(key, owner)
        if mine is not None:
            mine.delivered = False  # given back by its caller: its close need not
        line = self.lines.get(key)
        front = line.front() if line is not None else None
        if line is not None and front is not None and await self._hand_over(key, owner, line):
            return True
        released = await self.gateway.run(self.backend.releasing(key, owner))
        if front is not None:
            front.wake.set()  # the key is free: look now, not at the end of a slice
        return released

    @staticmethod
    def _ready(line: Line, front: Place, owner: str) -> bool:
        """Whether ``front`` can be handed the lock now: it asked (its ttl is known), has
        no request of its own on the way, and is first in etcd's queue or not queued."""
        waiter = front.waiter
        queued_first = waiter.first() is not None
        unqueued = waiter.queued_at is None and not waiter.join_in_flight
        return (
            front.owner != owner
            and front.ttl is not None
            and front.granted is None
            and not front.busy
            and line.handing is None
            and (queued_first or unqueued)
        )

    async def _hand_over(self, key: str, owner: str, line: Line) -> bool:
        """Hand ``owner``'s lock to the front of ``line`` if it is ready; False if not done."""
        front = line.front()
        if front is None or not self._ready(line, front, owner):
            return False
        assert front.ttl is not None
        after = line.places[1].waiter if len(line.places) > 1 else None
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.handing = done
        try:
            steps = handing_over(self.backend, key, owner, front.waiter, front.ttl, after)
            grant = await self.gateway.run(steps)
        except BackendError:
            grant = None  # done or not, the usual release frees the key
        finally:
            line.handing = None
            done.set_result(None)
        if grant is None:
            return False
        front.granted = grant
        self.holders[key] = front.owner
        front.wake.set()
        if not front.turn.done():
            front.turn.set_result(None)
        return True

    async def extend(self, key: str, owner: str, ttl: float) -> bool:
        return (await self.adopt(key, owner, ttl)).acquired

    async def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        return await self.gateway.run(self.backend.adopting(key, owner, ttl))

    async def waiter(self, key: str, owner: str, fair: bool) -> AsyncWaiter:
        made = EtcdWaiter(self.backend, key, owner)
        self.backend.queue.register(key, owner, made)
        line = self.lines.get(key)
        if line is None:
            line = self.lines[key] = Line()
        place = Place(made)
        line.join(place)
        if line.front() is not place:
            self._enqueue_soon(key, line)
        return LineWaiter(self, line, place)

    def _enqueue_soon(self, key: str, line: Line) -> None:
        if line.enqueuer is None and not line.enqueue_failed and len(line.places) > 1:
            line.enqueuer = asyncio.ensure_future(self._enqueue(key, line))

    async def _enqueue(self, key: str, line: Line) -> None:
        """Queue in etcd the places behind the front not queued yet, in the order they
        asked, :data:`~.batch.BATCH_MAX` per transaction (see :mod:`.batch`)."""
        try:
            await asyncio.sleep(0)  # those that ask in this iteration of the loop come along
            while True:
                places = [
                    place
                    for place in line.places
                    if place.waiter.queued_at is None and not place.waiter.join_in_flight
                ][:BATCH_MAX]
                front = line.front()
                if not places or (front in places and front is not None and front.busy):
                    # (the front's attempt on its way may queue it: ours follow once it ends)
                    return
                waiters = [place.waiter for place in places]
                done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                line.enqueuing = done
                try:
                    await self.gateway.run(queueing(self.backend, key, waiters))
                except BackendError:
                    line.enqueue_failed = True
                    return
                finally:
                    line.enqueuing = None
                    done.set_result(None)
                if front is not None and front.waiter in waiters:
                    front.waiter.reached_front()  # nobody of its line is before it
        finally:
            line.enqueuer = None


class LineWaiter(AsyncWaiter):
    """A waiter's place in its key's line: its turn, then (at the front) waiting for a
    release on this loop or, if the holder is elsewhere, the store-side waiter's watch."""

    def __init__(self, ops: EtcdOps, line: Line, place: Place) -> None:
        self._ops = ops
        self._line = line
        self._place = place
        self._closed = False

    def _may_park(self) -> bool:
        """Whether we may wait on the loop rather than watch: at the front, the key held
        through this loop (whose release hands it to us, or wakes us), and first in etcd's
        queue or not in it (then the next look at the store, a slice later, queues us)."""
        place = self._place
        key = place.waiter.key
        holder = self._ops.holders.get(key)
        # (a hold released through the blocking API is gone from the backend's holds)
        if not place.turn.done() or holder is None or self._ops.backend.held(key, holder) is None:
            return False
        waiter = place.waiter
        unqueued = waiter.queued_at is None and not waiter.join_in_flight
        return unqueued or waiter.first() is not None

    async def wait(self, timeout: float) -> Grant | None:
        place = self._place
        deadline = time.monotonic() + timeout
        if not place.turn.done():
            # shielded: a timeout must not cancel the turn, which stays ours in the line
            await wait_at_most(asyncio.shield(place.turn), timeout)
            if place.granted is not None or not place.turn.done():
                return await self._ops._handed(place)
            if not self._may_park():
                return None  # at the front now: the next attempt asks the store
        if self._may_park():
            lease_id = place.waiter.first()
            # Our queue entry must outlive the wait: renew the shared lease when it is due.
            queue = self._ops.backend.queue
            if lease_id is not None and not await self._ops.gateway.run(queue.alive(lease_id)):
                place.waiter.queued_at = None
                return None
            remaining = deadline - time.monotonic()
            if not place.wake.is_set() and remaining > 0:
                await wait_at_most(place.wake.wait(), min(remaining, WAIT_SLICE))
            place.wake.clear()
            return await self._ops._handed(place)
        place.busy = True
        try:
            remaining = max(0.0, deadline - time.monotonic())
            handed = await self._ops.gateway.run(place.waiter.waiting(remaining))
        finally:
            place.busy = False
        return handed or await self._ops._handed(place)

    async def close(self, acquired: bool, *, reachable: bool = True) -> None:
        """Leave the line and etcd's queue; a lock handed to us that our caller did not
        take (it was cancelled or timed out meanwhile) goes on to the next."""
        if self._closed:
            return
        self._closed = True
        ops, line, place = self._ops, self._line, self._place
        while (busy := line.busy()) is not None:  # it may hand the lock to us, or queue us
            await asyncio.shield(busy)
        line.leave(place)
        key = place.waiter.key
        if not line.places and ops.lines.get(key) is line:
            del ops.lines[key]
        unused = place.granted is not None or (place.delivered and not acquired)
        place.granted = None
        await ops.gateway.run(place.waiter.leaving(acquired or unused, reachable))
        if unused:
            await ops.release(key, place.owner)
