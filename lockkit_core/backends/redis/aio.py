"""``redis://`` on an event loop: the lock operations over ``redis.asyncio``.

The same Lua script, the same arguments and the same reading of its answers as the blocking
operations (:class:`~.backend.RedisBackend` builds both), sent by a ``redis.asyncio`` client
of the running loop; driver errors become lockkit's errors through the backend's one
translation (:meth:`~.backend.RedisBackend.failure`). Hand-over notices reach asyncio
waiters through the backend's one listener (:class:`AsyncRedisWaiter`), never a thread each.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ...errors import BackendUnavailable
from ..aio import AsyncOps
from ..base import Grant

if TYPE_CHECKING:
    from .backend import RedisBackend

__all__ = ["RedisOps"]

T = TypeVar("T")

#: how long (seconds, plus two ttls) an attempt that failed in an outage is given back for
#: (the blocking path's ABANDONED_FOR)
ABANDONED_FOR = 60.0
#: connections of one event loop's client unless the ``max_connections`` option says
MAX_CONNECTIONS = 8


class RedisOps(AsyncOps):
    """The lock operations of one :class:`RedisBackend` on one event loop."""

    def __init__(self, backend: RedisBackend) -> None:
        import redis.asyncio
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import NoScriptError, RedisError

        self._backend = backend
        self._errors = (RedisError, TimeoutError)
        self._noscript = NoScriptError
        options = dict(backend.client_options)
        # Many tasks share the loop's connections: one waits (on the loop) for a free one,
        # within the socket timeout, rather than failing with "too many connections".
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            backend.client_url,
            max_connections=options.pop("max_connections", MAX_CONNECTIONS),
            timeout=options.get("socket_timeout", 5.0),
            # No driver retries: they would stretch the caller's timeout (see RedisBackend).
            retry=Retry(NoBackoff(), 0),
            **options,
        )
        self.client = redis.asyncio.Redis(connection_pool=pool)
        self._source = backend._script.source
        self._sha = backend._script.sha

    async def _script(self, numkeys: int, args: list[Any]) -> Any:
        try:
            return await self.client.evalsha(self._sha, numkeys, *args)
        except self._noscript:
            await self.client.script_load(self._source)  # the same digest: it is the source's
            return await self.client.evalsha(self._sha, numkeys, *args)

    async def _call(self, what: str, request: Callable[[], Awaitable[T]], retry: bool) -> T:
        for attempt in (0, 1):
            try:
                return await request()
            except self._errors as exc:
                error = self._backend.failure(what, exc, may_retry=retry and attempt == 0)
                if error is None:
                    continue
                raise error from exc
        raise AssertionError("unreachable")

    async def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        backend = self._backend
        args = backend.acquire_args(key, owner, ttl)
        sent = time.monotonic()
        try:
            reply = await self._call(f"acquire {key!r}", lambda: self._script(4, args), True)
        except BackendUnavailable:
            # As the blocking path: the request may still land when the link heals.
            backend.leaver.give_back(key, owner, time.monotonic() + ABANDONED_FOR + 2 * ttl)
            raise
        return backend.acquire_answer(key, owner, ttl, reply, sent)

    async def release(self, key: str, owner: str) -> bool:
        args = self._backend.release_args(key, owner)
        return bool(await self._call(f"release {key!r}", lambda: self._script(4, args), False))

    async def extend(self, key: str, owner: str, ttl: float) -> bool:
        args = self._backend.on_record_args("extend", key, owner, ttl)
        return bool(await self._call(f"extend {key!r}", lambda: self._script(1, args), True))

    async def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        args = self._backend.on_record_args("adopt", key, owner, ttl)
        reply = await self._call(f"adopt {key!r}", lambda: self._script(1, args), True)
        return self._backend.adopt_answer(reply)

    async def abandon(self, key: str, owner: str) -> None:
        """Leave the queue and give back any lease ``owner`` holds: an attempt cancelled on
        its way may have queued it, or taken the key."""
        args = self._backend.leave_args(key, owner)
        await self._call(f"leave the queue of {key!r}", lambda: self._script(4, args), True)
