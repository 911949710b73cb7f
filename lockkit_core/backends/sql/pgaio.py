"""``postgresql://`` on an event loop: the backend's statements on ``psycopg.AsyncConnection``.

The statements, their parameters and the reading of their rows are the blocking backend's
(:meth:`PostgresBackend.acquire_statement` and its siblings); only the I/O is here.

* Every exchange is bounded by the socket timeout (in psycopg's wait); a connection that
  did not answer, or whose statement was interrupted, is closed, never reused.
* A statement is never abandoned half-way by a cancelled caller: it is awaited to its end
  (shielded, within the socket timeout) so that a grant it made is committed before the
  driver gives it back, never after.
* Waiters share one listening connection per loop (:class:`Listener`): it ``LISTEN``s on a
  key's channel while anyone here waits on that key, and a ``NOTIFY`` from a release wakes
  the key's waiters, who then try again (every wait is also bounded by the lease left, for a
  holder that crashed without a notice). No connection or thread per waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors

from ...errors import BackendError, BackendUnavailable
from ...py310 import wait_at_most
from ..aio import AsyncOps, AsyncWaiter
from ..base import Grant
from .pgpool import DEAD_ON_USE, MAX_IDLE, NoAnswer, translated

if TYPE_CHECKING:
    from .postgres import PostgresBackend

__all__ = ["AsyncPgPool", "BoundedAsyncConnection", "Listener", "PgOps"]

log = logging.getLogger("lockkit.postgresql")

#: connections of one loop's pool in use at once (more tasks wait their turn on the loop),
#: and on top of those for releases, which must not queue behind the attempts they unblock
MAX_CONNECTIONS = 8
RELEASE_CONNECTIONS = 2
#: how often the listener hands its connection over to pending LISTEN / UNLISTEN commands;
#: a local wait, not a round trip: a notice wakes it at once
LISTEN_TURN = 0.05


class BoundedAsyncConnection(psycopg.AsyncConnection[Any]):
    """``psycopg.AsyncConnection`` whose every exchange ends within ``io_timeout`` seconds
    (the asyncio form of :class:`~.pgpool.BoundedConnection`). Timing a statement out by
    cancelling it instead has psycopg ask the server to cancel it, over the link that is
    down, for ten seconds more."""

    io_timeout: float = 10.0
    #: the server process of a connection given up for want of an answer
    abandoned_pid: int | None = None

    async def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        if timeout is not None:  # notifies(timeout=...): its own bound, not an outage
            return await super().wait(gen, interval, timeout)
        try:
            return await super().wait(gen, interval, self.io_timeout)
        except pg_errors._WaitTimeout as exc:  # psycopg has no public name for it
            self.abandoned_pid = self.pgconn.backend_pid
            self.pgconn.finish()
            raise NoAnswer(f"no answer from the server within {self.io_timeout:g} s") from exc


class AsyncPgPool:
    """Up to :data:`MAX_IDLE` idle autocommit ``AsyncConnection``s of one loop."""

    def __init__(self, backend: PostgresBackend) -> None:
        self._backend = backend
        self.where = backend.url.redacted()
        self.io_timeout = float(backend.io_timeout)
        self._idle: list[BoundedAsyncConnection] = []
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._release_slots = asyncio.Semaphore(RELEASE_CONNECTIONS)

    async def connect(self, what: str) -> BoundedAsyncConnection:
        """A new autocommit connection (within the conninfo's ``connect_timeout``)."""
        with translated(what, self.where):
            conn = await BoundedAsyncConnection.connect(self._backend.conninfo, autocommit=True)
        conn.io_timeout = self.io_timeout
        return conn

    async def run(
        self,
        sql: str,
        params: dict[str, Any],
        what: str,
        abandoned: Callable[[int], None] | None = None,
        *,
        releasing: bool = False,
    ) -> Sequence[tuple[Any, ...]]:
        """Execute one statement to its end (see the module docstring) and return its rows.
        ``abandoned(pid)`` as ``PgPool.run``: the server did not answer in time, and the
        statement may still run on its server process ``pid``. ``releasing``: a release,
        which has connections of its own."""
        slots = self._release_slots if releasing else self._slots
        task = asyncio.ensure_future(self._run(slots, sql, params, what, abandoned))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait([task])  # within the socket timeout
            if not task.cancelled():
                task.exception()  # seen: the driver gives back a grant it may have made
            raise

    async def _run(
        self,
        slots: asyncio.Semaphore,
        sql: str,
        params: dict[str, Any],
        what: str,
        abandoned: Callable[[int], None] | None,
    ) -> Sequence[tuple[Any, ...]]:

        async with slots:
            return await self._execute(sql, params, what, abandoned)

    async def _execute(
        self,
        sql: str,
        params: dict[str, Any],
        what: str,
        abandoned: Callable[[int], None] | None,
    ) -> Sequence[tuple[Any, ...]]:
        for attempt in (0, 1):
            fresh = not self._idle
            conn = await self.connect(what) if fresh else self._idle.pop()
            started = time.monotonic()
            try:
                with translated(what, self.where):
                    cursor = await conn.execute(sql, params)
                    rows = await cursor.fetchall() if cursor.description else []
            except BackendError as exc:
                await conn.close()
                if abandoned is not None and conn.abandoned_pid is not None:
                    abandoned(conn.abandoned_pid)
                if attempt == 0 and isinstance(exc.__cause__, pg_errors.UndefinedTable):
                    await asyncio.to_thread(self._backend.create_schema)  # once per table
                    continue
                if (
                    attempt == 0
                    and not fresh
                    and isinstance(exc, BackendUnavailable)
                    and time.monotonic() - started < DEAD_ON_USE
                ):
                    continue  # a pooled connection the server had ended: once more, new
                raise
            except BaseException:
                await conn.close()
                raise
            if len(self._idle) < MAX_IDLE and not conn.closed:
                self._idle.append(conn)
            else:
                await conn.close()
            return rows
        raise AssertionError("unreachable")


class Listener:
    """One ``LISTEN`` connection of a loop, shared by its waiters (see the module docstring).

    A notice wakes the key's first waiter here, not all of them: one attempt per release,
    in the order they came. A woken waiter that leaves without the lock wakes the next."""

    def __init__(self, pool: AsyncPgPool) -> None:
        self._pool = pool
        self._conn: BoundedAsyncConnection | None = None
        #: per channel, its waiters in arrival order (dicts keep insertion order)
        self._waiters: dict[str, dict[PgWaiter, None]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def listen(self, channel: str, waiter: PgWaiter) -> None:
        """Queue ``waiter`` for notices on ``channel``, listening once this returns."""
        async with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = await self._pool.connect("listen for releases")
                self._waiters.clear()
            if channel not in self._waiters:
                self._waiters[channel] = {}
                with translated("listen for releases", self._pool.where):
                    await self._conn.execute(f'LISTEN "{channel}"')
            self._waiters[channel][waiter] = None
            if self._reader is None or self._reader.done():
                self._reader = asyncio.ensure_future(self._read())

    def wake_next(self, channel: str) -> None:
        """Wake the first waiter on ``channel`` that is not awake already."""
        for waiter in self._waiters.get(channel, {}):
            if not waiter.event.is_set():
                waiter.event.set()
                return

    def forget(self, waiter: PgWaiter) -> None:
        """Stop queueing ``waiter`` (its channel stays listened to while the connection
        lives: a LISTEN costs the server nothing between notices)."""
        waiters = self._waiters.get(waiter.channel)
        if waiters is not None:
            waiters.pop(waiter, None)

    async def _read(self) -> None:
        while self._waiters:
            conn = self._conn
            if conn is None or conn.closed:
                break
            try:
                async with self._lock:  # LISTEN commands go in between
                    async for notice in conn.notifies(timeout=LISTEN_TURN):
                        self.wake_next(notice.channel)
            except Exception as exc:  # the connection broke: every waiter looks again
                log.debug("the listen connection of %s failed: %r", self._pool.where, exc)
                with contextlib.suppress(Exception):
                    await conn.close()
                self._conn = None
                for waiters in self._waiters.values():
                    for waiter in waiters:
                        waiter.event.set()  # a release may have gone unheard
                break
            await asyncio.sleep(0)


class PgOps(AsyncOps):
    """The lock operations of one :class:`PostgresBackend` on one event loop."""

    def __init__(self, backend: PostgresBackend) -> None:
        self._backend = backend
        self.pool = AsyncPgPool(backend)
        self.listener = Listener(self.pool)

    async def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        backend = self._backend
        sql, params = backend.acquire_statement(key, owner, ttl)
        # An answer that never came: the statement may still commit when the link heals, and
        # is given back then (the blocking path's give-back).
        abandoned = backend.abandoned(key, owner, ttl)
        rows = await self.pool.run(sql, params, f"acquire {key!r}", abandoned)
        return backend.acquire_answer(rows)

    async def release(self, key: str, owner: str) -> bool:
        sql, params = self._backend.release_statement(key, owner)
        rows = await self.pool.run(sql, params, f"release {key!r}", releasing=True)
        return bool(rows and rows[0][0])

    async def extend(self, key: str, owner: str, ttl: float) -> bool:
        return (await self.adopt(key, owner, ttl)).acquired

    async def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        sql, params = self._backend.extend_statement(key, owner, ttl)
        rows = await self.pool.run(sql, params, f"extend {key!r}")
        return Grant(True, int(rows[0][0])) if rows else Grant(False)

    async def waiter(self, key: str, owner: str, fair: bool) -> AsyncWaiter:
        made = PgWaiter(self.listener, self._backend.channel(key))
        await self.listener.listen(made.channel, made)
        return made


class PgWaiter(AsyncWaiter):
    """Woken by a notice on its key's channel (when first in line here), or when its wait is
    up (the plan bounds it by the lease left)."""

    def __init__(self, listener: Listener, channel: str) -> None:
        self._listener = listener
        self.channel = channel
        self.event = asyncio.Event()

    async def wait(self, timeout: float) -> Grant | None:
        await wait_at_most(self.event.wait(), timeout)
        self.event.clear()
        return None

    async def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self._listener.forget(self)
        if not acquired:
            # We may have been woken for a release and are leaving without trying: the
            # next one in line tries instead (a spare wake costs it one attempt).
            self._listener.wake_next(self.channel)
