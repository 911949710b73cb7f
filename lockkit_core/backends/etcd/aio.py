"""``etcd://`` on an event loop: the backend's plans of requests over asyncio streams.

The same plans as the blocking operations (:meth:`EtcdBackend.attempt`, ``releasing``,
``adopting``, the waiter's ``waiting`` and ``leaving``), whose :class:`~.client.Call` steps
are sent here by :class:`AsyncGateway`: HTTP/1.1 to the JSON gateway on ``asyncio`` streams
(no dependency: the standard library's, as the blocking client's), with the blocking client's
member order, time budget and reading of answers (:meth:`GatewayClient.answer`). A waiter's
watch is a streaming request of its own, read on the loop (:class:`AsyncWatch`): no thread
per waiter, and a cancelled waiter's connection is simply closed. The lock operations of a
loop, and the line its waiters of one key stand in, are in :mod:`.line`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any, TypeVar

from ...py310 import within
from ...sansio import arun
from .client import Call, Endpoint, GatewayClient, Join, Refused, Steps, TokenExpired, b64
from .watch import READ_ON, NextEvents, OpenWatch, Pause, settle

__all__ = ["AsyncGateway", "AsyncWatch"]

T = TypeVar("T")

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]

#: idle connections kept per member and loop
IDLE_MAX = 16


class HttpError(Exception):
    """A member's answer we cannot read as HTTP/1.1."""


async def _open(client: GatewayClient, endpoint: Endpoint, timeout: float) -> Stream:
    host, port = endpoint
    opening = asyncio.open_connection(
        host, port, ssl=client.tls, server_hostname=host if client.tls else None
    )
    return await within(opening, timeout)


async def _exchange(
    stream: Stream, request: bytes, *, body: bool = True
) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` and read the answer's head (and its body, unless a stream follows)."""
    reader, writer = stream
    writer.write(request)
    await writer.drain()
    status, headers = await _head(reader)
    return status, headers, (await _body(reader, headers) if body else b"")


def _request(client: GatewayClient, endpoint: Endpoint, path: str, payload: bytes) -> bytes:
    headers = client.headers()
    lines = [
        f"POST /v3/{path} HTTP/1.1",
        f"Host: {endpoint[0]}:{endpoint[1]}",
        f"Content-Length: {len(payload)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The status and (lower-cased) headers of a response."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("the member closed the connection")
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise HttpError(f"not an HTTP answer: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            return int(parts[1]), headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()


async def _chunk(reader: asyncio.StreamReader) -> bytes:
    """The next chunk of a chunked body; b"" at its end."""
    size_line = await reader.readline()
    if not size_line:
        raise asyncio.IncompleteReadError(b"", None)
    size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
    if size == 0:
        # Trailers (the gateway sends Grpc-Trailer-* after an error), then a blank line.
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        return b""
    data = await reader.readexactly(size)
    await reader.readexactly(2)
    return data


async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    if "chunked" in headers.get("transfer-encoding", ""):
        parts = []
        while part := await _chunk(reader):
            parts.append(part)
        return b"".join(parts)
    return await reader.read()


class AsyncGateway:
    """:class:`GatewayClient`'s requests on one event loop, through its members, with its
    time budget: a refused connection moves on to the next member at once, a member that does
    not answer within the budget is a ``BackendUnavailable``."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client
        self._idle: dict[Endpoint, list[Stream]] = {}

    async def perform(self, step: Any) -> Any:
        """One step of a plan, on the loop: a :class:`Call` or a waiter's watch step."""
        if isinstance(step, Call):
            return await self.call(step.path, step.body, step.what)
        if isinstance(step, Join):
            # Shielded: a joiner cancelled while it waits leaves the grant to its maker.
            return await asyncio.shield(asyncio.wrap_future(step.future))
        if isinstance(step, OpenWatch):
            return await AsyncWatch.open(self.client, step.key, step.timeout)
        if isinstance(step, NextEvents):
            return await step.watch.next_events(step.timeout)
        assert isinstance(step, Pause), step
        await asyncio.sleep(step.seconds)
        return None

    async def run(self, steps: Steps[T]) -> T:
        """Run a plan on the loop."""
        return await arun(steps, self.perform)

    async def call(self, path: str, body: Any, what: str) -> dict[str, Any]:
        """:meth:`GatewayClient.call` on the loop."""
        deadline = time.monotonic() + self.client.timeout
        if self.client.needs_login:
            await self._login(deadline, what)
        try:
            return await self._call(path, body, what, deadline)
        except TokenExpired:
            await self._login(deadline, what)
            return await self._call(path, body, what, deadline)

    async def _login(self, deadline: float, what: str) -> None:
        credentials = self.client.credentials
        assert credentials is not None
        name, password = credentials
        self.client.logged_in(None)
        payload = {"name": name, "password": password}
        answer = await self._call(
            "auth/authenticate", payload, f"log in as {name!r} to {what}", deadline
        )
        self.client.logged_in(answer)

    async def _call(self, path: str, body: Any, what: str, deadline: float) -> dict[str, Any]:
        client = self.client
        payload = json.dumps(body).encode()
        failures: list[str] = []
        for endpoint in client.order():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                status, data = await self._request(endpoint, path, payload, remaining)
            except Refused as exc:
                failures.append(f"{endpoint[0]}:{endpoint[1]}: {exc}")
                client._skip(endpoint)
                continue
            except (TimeoutError, OSError, HttpError, asyncio.IncompleteReadError) as exc:
                raise client.silent(endpoint, what, exc) from exc
            decoded = client.answer(endpoint, what, status, data, failures)
            if decoded is not None:
                return decoded
        raise client.unreachable(what, failures)

    async def _request(
        self, endpoint: Endpoint, path: str, payload: bytes, timeout: float
    ) -> tuple[int, bytes]:
        """One request to one member (see ``GatewayClient._request``)."""
        idle = self._idle.setdefault(endpoint, [])
        for attempt in (0, 1):
            reused = bool(idle)
            if reused:
                reader, writer = idle.pop()
            else:
                try:
                    reader, writer = await _open(
                        self.client, endpoint, min(timeout, self.client.connect_timeout)
                    )
                except (ConnectionError, TimeoutError, OSError) as exc:
                    raise Refused(repr(exc)) from exc
            request = _request(self.client, endpoint, path, payload)
            try:
                status, headers, data = await within(_exchange((reader, writer), request), timeout)
            except (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError):
                writer.close()
                if reused and attempt == 0:
                    continue  # a pooled connection the member had closed: ask once more
                raise
            except BaseException:
                writer.close()  # cancelled or timed out mid-answer: the stream is unusable
                raise
            if headers.get("connection", "").lower() == "close" or len(idle) >= IDLE_MAX:
                writer.close()
            else:
                idle.append((reader, writer))
            return status, data
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the idle connections."""
        for idle in self._idle.values():
            for _, writer in idle:
                writer.close()
        self._idle.clear()


class AsyncWatch:
    """:class:`~.watch.Watch` on the loop: one streaming ``POST /v3/watch`` on a connection
    of its own, its JSON lines read from the chunked answer."""

    def __init__(self) -> None:
        self._stream: Stream | None = None
        self._buffer = b""
        self.broken = False
        self.revision = 0

    @classmethod
    async def open(cls, client: GatewayClient, key: str, timeout: float) -> AsyncWatch:
        """A watch on ``key`` through the first member that takes it, ``broken`` if none."""
        watch = cls()
        deadline = time.monotonic() + timeout
        payload = json.dumps({"create_request": {"key": b64(key)}}).encode()
        for endpoint in client.order():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                reader, writer = await _open(
                    client, endpoint, min(remaining, client.connect_timeout)
                )
            except (OSError, TimeoutError):
                continue
            request = _request(client, endpoint, "watch", payload)
            try:
                status, _, _ = await within(
                    _exchange((reader, writer), request, body=False),
                    max(0.0, deadline - time.monotonic()),
                )
            except (OSError, TimeoutError, HttpError, asyncio.IncompleteReadError):
                writer.close()
                continue
            except BaseException:
                writer.close()
                raise
            if status != 200:
                writer.close()
                continue
            watch._stream = (reader, writer)
            try:
                created = await watch.next_events(deadline - time.monotonic())
            except BaseException:
                watch.close()
                raise
            if created is None or not watch.revision:
                watch.close()
            return watch
        watch.broken = True
        return watch

    async def _line(self) -> bytes:
        """The next line of the stream; b"" when it ended."""
        assert self._stream is not None
        reader = self._stream[0]
        while b"\n" not in self._buffer:
            chunk = await _chunk(reader)
            if not chunk:
                return b""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    async def next_events(self, timeout: float) -> list[dict[str, Any]] | None:
        """As ``Watch.next_events``: events, ``[]`` when the time ran out quietly, None when
        the stream ended or broke."""
        deadline = time.monotonic() + timeout
        while not self.broken:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            try:
                line = await within(self._line(), remaining)
            except TimeoutError:
                return []
            except (OSError, ValueError, asyncio.IncompleteReadError):
                line = b""
            found = settle(self, line)
            if found is not READ_ON:
                return found
        return None

    def close(self) -> None:
        """Drop the stream (the member cancels the watch when the connection goes)."""
        self.broken = True
        if self._stream is not None:
            with contextlib.suppress(Exception):
                self._stream[1].close()
            self._stream = None
