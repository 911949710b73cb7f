"""The asyncio lock operations' path to the server: :mod:`.wire`'s idea on an event loop.

Each lock operation is one script call: the command is packed by :class:`~.wire.Packer`,
written straight to a connection this module holds, and its reply parsed from the stream here.
``redis.asyncio``'s per-command path (a pool checkout that spawns a task, retry, events and
observability hooks, its stream parser) costs several times the loopback round trip; the
asyncio cycle must stay close to the blocking one.

What stays redis-py's: connecting (TCP, TLS, unix sockets, AUTH, SELECT, the handshake) by a
``redis.asyncio`` connection, and the exception types (error replies become the exceptions
redis-py raises for them), so the backend's error boundary translates failures exactly as
it does for the blocking path.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .resp import INCOMPLETE, parse_reply

__all__ = ["AsyncConnections"]

_POLL = hasattr(select, "poll")  # not on Windows
_TIMEOUT = getattr(asyncio, "timeout", None)  # Python 3.11 on

T = TypeVar("T")


class _Held:
    """One connected ``redis.asyncio`` connection, read and written here directly.

    ``peek`` is a duplicate of a plain (not TLS) socket, read without blocking right after a
    command is written: on loopback the server has often answered by then (the blocking
    path's ``recv`` finds it the same way), and the reply is taken without two turns of the
    event loop. What it does not find is awaited from the stream as usual. Reading both is
    safe: the stream reads only when the loop runs, and the peek drains whatever arrived
    before that.
    """

    __slots__ = ("__weakref__", "conn", "peek", "poller", "reader", "writer")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.reader: asyncio.StreamReader = conn._reader
        self.writer: asyncio.StreamWriter = conn._writer
        self.peek: socket.socket | None = None
        self.poller: select.poll | None = None
        if self.writer.get_extra_info("ssl_object") is None:
            sock = self.writer.get_extra_info("socket")
            if sock is not None:
                self.peek = sock.dup()
                self.peek.setblocking(False)
                weakref.finalize(self, self.peek.close)
                if _POLL:
                    self.poller = select.poll()
                    self.poller.register(self.peek, select.POLLIN)

    def stale(self) -> bool:
        """Closed by the server while idle (its timeout, a restart, a proxy), or out of step:
        reconnect rather than fail a request that was never sent. Anything readable while
        idle means one or the other (the loop may not have run since it arrived)."""
        if self.reader.at_eof() or self.writer.is_closing():
            return True
        return self.poller is not None and bool(self.poller.poll(0))

    def arrived(self) -> bytes:
        """What the server sent so far, without waiting (b"": nothing yet)."""
        if self.peek is None:
            return b""
        try:
            data = self.peek.recv(65536)
        except (BlockingIOError, InterruptedError):
            return b""
        if not data:
            raise _closed()
        return data

    async def more(self) -> bytes:
        """Wait for more of the reply from the stream."""
        data = await self.reader.read(65536)
        if not data:
            raise _closed()
        return data

    def close(self) -> None:
        """Close at once, without a round trip (it may be mid-reply)."""
        self.writer.transport.abort()
        if self.peek is not None:
            self.peek.close()
        self.conn._reader = self.conn._writer = None


def _closed() -> Exception:
    from redis.exceptions import ConnectionError as RedisConnectionError

    return RedisConnectionError("Connection closed by server.")


class AsyncConnections:
    """Connected ``redis.asyncio`` connections of one event loop, held by this path.

    A call borrows an idle connection (opening one, up to ``limit``; past that it waits for
    one within ``timeout``), writes one packed command, reads its whole reply and gives the
    connection back. A connection is reused only in a known state: after a complete reply.
    One interrupted mid-command (a timeout, a cancellation, a dropped link) is closed, never
    reused: its reply may still arrive and must not be read as the next command's.
    """

    def __init__(self, make: Callable[[], Any], limit: int, timeout: float | None) -> None:
        from redis._parsers import BaseParser
        from redis.exceptions import ConnectionError as RedisConnectionError

        self._make = make
        self._limit = limit
        self._timeout = timeout
        self._idle: list[_Held] = []
        self._open = 0  # connections made and not closed, idle or lent out
        self._waiting: deque[asyncio.Future[_Held | None]] = deque()
        self._parse_error = BaseParser.parse_error
        self._connection_error = RedisConnectionError

    async def call(self, packed: bytes) -> Any:
        """Send ``packed`` and return its parsed reply; raises redis-py's exceptions (and
        ``TimeoutError`` past the socket timeout)."""
        held = self._idle.pop() if self._idle else await self._take()
        if held is None or held.stale():
            held = await self._connect(held)
        parse = self._parse_error
        try:
            held.writer.write(packed)
            buf = held.arrived()
            reply, _ = parse_reply(buf, 0, parse) if buf else (INCOMPLETE, 0)
            if reply is INCOMPLETE:
                # Only now is there something to wait for: the timer is armed only here.
                reply = await self._within(self._rest(held, buf))
        except BaseException:
            held.close()
            self._give(None)
            raise
        self._give(held)
        if isinstance(reply, Exception):
            raise reply  # an error reply: the connection is in step
        return reply

    async def _rest(self, held: _Held, buf: bytes) -> Any:
        """The reply whose start is ``buf``, once the rest has come."""
        while True:
            buf += await held.more()
            reply, _ = parse_reply(buf, 0, self._parse_error)
            if reply is not INCOMPLETE:
                return reply

    async def _within(self, awaitable: Awaitable[T]) -> T:
        """``awaitable``'s result; ``TimeoutError`` past the socket timeout."""
        if _TIMEOUT is None:  # Python 3.10: no asyncio.timeout, its own TimeoutError class
            try:
                return await asyncio.wait_for(awaitable, self._timeout)
            except asyncio.TimeoutError:
                raise TimeoutError from None
        async with _TIMEOUT(self._timeout):
            return await awaitable

    async def _connect(self, stale: _Held | None) -> _Held:
        """A new connection in the place of ``stale`` (or in a free place: None), connected
        and ready within the connect timeout; the place is freed if that fails."""
        if stale is not None:
            stale.close()
        try:
            conn = self._make()
            await conn.connect()
            return _Held(conn)
        except BaseException:
            self._give(None)
            raise

    async def _take(self) -> _Held | None:
        """A connection given back meanwhile, or None: a free place to open one in."""
        if self._open < self._limit:
            self._open += 1
            return None
        waiter: asyncio.Future[_Held | None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            return await self._within(waiter)
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self._give(waiter.result())  # handed one just as we gave up: pass it on
            else:
                waiter.cancel()
                with contextlib.suppress(ValueError):
                    self._waiting.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise self._connection_error(
                    f"no connection free within {self._timeout:g} s: all {self._limit} in "
                    "use (the max_connections option)"
                ) from None
            raise

    def _give(self, held: _Held | None) -> None:
        """Pass ``held`` (None: its place, after it was closed) to the first caller waiting
        for one, else keep it idle (or free the place)."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(held)
                return
        if held is None:
            self._open -= 1
        else:
            self._idle.append(held)
