"""``redis://`` on an event loop: the lock operations over ``redis.asyncio``.

The same Lua script, the same arguments and the same reading of its answers as the blocking
operations (:class:`~.backend.RedisBackend` builds both), sent on ``redis.asyncio``
connections of the running loop held by :mod:`.aio_wire`; driver errors become lockkit's
errors through the backend's one translation (:meth:`~.backend.RedisBackend.failure`).
Hand-over notices reach asyncio waiters through the backend's one listener thread
(:class:`AsyncRedisWaiter`), which wakes their loop; never a thread per waiter.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, BackendUnavailable
from ...sansio import arun
from ..aio import AsyncOps, AsyncWaiter, LoopEvent
from ..base import Grant
from .aio_wire import AsyncConnections
from .clients import ASYNC_MAX_CONNECTIONS
from .leaver import ABANDONED_FOR
from .scripts import SCRIPT_LOAD
from .waiter import READY_WITHIN, Confirm, RedisWaiter
from .wire import Packer

if TYPE_CHECKING:
    from .backend import RedisBackend

__all__ = ["RedisOps"]


class RedisOps(AsyncOps):
    """The lock operations of one :class:`RedisBackend` on one event loop."""

    def __init__(self, backend: RedisBackend) -> None:
        from redis.exceptions import NoScriptError, RedisError

        self._backend = backend
        self._errors = (RedisError, TimeoutError)
        self._noscript = NoScriptError
        self.client = backend.make_async_client()
        self._source = backend._script.source
        self._sha = backend._script.sha
        self._packers = {n: Packer(("EVALSHA", self._sha, n)) for n in (1, 4, 5)}
        # The client is a maker of connections (TLS, AUTH, SELECT, the Sentinel's master:
        # redis-py's); they are held and lent by AsyncConnections. A cluster client routes
        # each command itself, and keeps doing so.
        pool = getattr(self.client, "connection_pool", None)
        self._connections = (
            None
            if pool is None
            else AsyncConnections(
                pool.make_connection,
                getattr(pool, "max_connections", None) or ASYNC_MAX_CONNECTIONS,
                backend._socket_timeout,
            )
        )

    async def _script(self, what: str, key: str, numkeys: int, args: list[Any], retry: bool) -> Any:
        """Run the script with ``args``; driver errors become the backend's (``what`` the
        key is for names the operation: formatted only then). ``retry``: once, at once, on
        a dropped connection (idempotent operations only)."""
        if self._connections is None:
            call = self._routed(numkeys, args)
        else:
            packed = self._packers[numkeys].pack(args)
            call = functools.partial(self._connections.call, packed)
        for attempt in (0, 1):
            try:
                try:
                    return await call()
                except self._noscript:
                    await self._load()  # the same digest: the source's
                    return await call()
            except self._errors as exc:
                may_retry = retry and attempt == 0
                error = self._backend.failure(f"{what} {key!r}", exc, may_retry=may_retry)
                if error is None:
                    continue
                raise error from exc
        raise AssertionError("unreachable")

    def _routed(self, numkeys: int, args: list[Any]) -> Callable[[], Awaitable[Any]]:
        return lambda: self.client.evalsha(self._sha, numkeys, *args)

    async def _load(self) -> None:
        if self._connections is None:
            await self.client.script_load(self._source)
        else:
            await self._connections.call(SCRIPT_LOAD.pack((self._source,)))

    async def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        backend = self._backend
        args = backend.acquire_args(key, owner, ttl)
        sent = time.monotonic()
        try:
            reply = await self._script("acquire", key, 5, args, True)
        except BackendUnavailable:
            # As the blocking path: the request may still land when the link heals.
            backend.leaver.give_back(key, owner, time.monotonic() + ABANDONED_FOR + 2 * ttl)
            raise
        return backend.acquire_answer(key, owner, ttl, reply, sent)

    async def release(self, key: str, owner: str) -> bool:
        backend = self._backend
        args = backend.release_args(key, owner, ours=True)
        sent = time.monotonic()
        reply = await self._script("release", key, 4, args, False)
        return backend.release_answer(key, reply, sent)

    async def extend(self, key: str, owner: str, ttl: float) -> bool:
        args = self._backend.on_record_args("extend", key, owner, ttl)
        return bool(await self._script("extend", key, 1, args, True))

    async def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        args = self._backend.on_record_args("adopt", key, owner, ttl)
        return self._backend.adopt_answer(await self._script("adopt", key, 1, args, True))

    async def waiter(self, key: str, owner: str, fair: bool) -> AsyncWaiter:
        waiter = AsyncRedisWaiter(self, key, owner, fair)
        await waiter.ready()
        return waiter

    async def abandon(self, key: str, owner: str) -> None:
        """Leave the queue and give back any lease ``owner`` holds: an attempt cancelled on
        its way may have queued it, or taken the key."""
        args = self._backend.leave_args(key, owner)
        await self._script("leave the queue of", key, 5, args, True)


class AsyncRedisWaiter(AsyncWaiter):
    """A :class:`RedisWaiter` (its queue entry, its notices through the backend's one
    listener, its decisions) whose pauses and confirming attempts are awaited."""

    def __init__(self, ops: RedisOps, key: str, owner: str, fair: bool) -> None:
        self._ops = ops
        self._event = LoopEvent()
        self._waiter = RedisWaiter(ops._backend, key, owner, fair, self._event)

    async def ready(self) -> None:
        """Give the listener up to READY_WITHIN to subscribe (see RedisWaiter), on the loop."""
        listener = self._waiter._listener
        until = time.monotonic() + READY_WITHIN
        while not listener.ready_for(self._waiter.key) and time.monotonic() < until:
            await asyncio.sleep(0.001)

    async def wait(self, timeout: float) -> Grant | None:
        return await arun(self._waiter.waiting(timeout), self._step)

    async def _step(self, step: float | Confirm) -> Grant | None:
        waiter = self._waiter
        if isinstance(step, Confirm):
            assert waiter.ttl is not None
            return await self._ops.try_acquire(waiter.key, waiter.owner, waiter.ttl)
        await self._event.wait(step)
        return None

    async def close(self, acquired: bool, *, reachable: bool = True) -> None:
        """Leave the queue now, in one round trip, so a cancelled or timed-out waiter leaves
        nothing behind (passing on a lock handed to it meanwhile); after a failure, or if
        the store does not answer, the backend's leaver does it once it can."""
        waiter = self._waiter
        waiter.forget()
        if acquired or waiter.queued_at is None:
            return
        if reachable:
            try:
                await self._ops.abandon(waiter.key, waiter.owner)
                return
            except BackendError:
                pass
        self._ops._backend.leaver.leave(waiter.key, waiter.owner, waiter.entry_until)
