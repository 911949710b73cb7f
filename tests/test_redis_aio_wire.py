"""The asyncio lock operations' command path: reply parsing, held connections, interrupted
commands, the connection limit, idle connections closed by the server, lost scripts."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
import redis
from redis._parsers import BaseParser
from redis.exceptions import NoScriptError, ResponseError

from lockkit_core import LockKit
from lockkit_core.backends.redis.aio_wire import INCOMPLETE, AsyncConnections, parse_reply
from lockkit_core.backends.redis.wire import Packer

CLIENT_ID = Packer(("CLIENT", "ID")).pack(())
BLPOP = Packer(("BLPOP",))


def _parse(data: bytes) -> Any:
    reply, end = parse_reply(data, 0, BaseParser.parse_error)
    assert reply is INCOMPLETE or end == len(data)
    return reply


@pytest.mark.parametrize(
    "data, expected",
    [
        (b":42\r\n", 42),
        (b":-1\r\n", -1),
        (b"$3\r\nabc\r\n", b"abc"),
        (b"$0\r\n\r\n", b""),
        (b"$-1\r\n", None),
        (b"+OK\r\n", b"OK"),
        (b"*2\r\n:1\r\n$19\r\n1764000000000000001\r\n", [1, b"1764000000000000001"]),
        (b"*3\r\n*1\r\n:1\r\n*2\r\n:0\r\n:5\r\n*1\r\n:-1\r\n", [[1], [0, 5], [-1]]),
        (b"*0\r\n", []),
        (b"$4\r\na\r\nb\r\n", b"a\r\nb"),  # a bulk string is read by its length
    ],
)
def test_replies_parse_as_redis_py_gives_them(data: bytes, expected: Any) -> None:
    assert _parse(data) == expected
    for cut in range(len(data)):  # any part of a reply that has arrived is not a reply
        assert _parse(data[:cut]) is INCOMPLETE


def test_error_replies_become_redis_pys_exceptions() -> None:
    noscript = _parse(b"-NOSCRIPT No matching script.\r\n")
    assert isinstance(noscript, NoScriptError)
    other = _parse(b"-ERR lockkit: unknown operation x\r\n")
    assert type(other) is ResponseError and "unknown operation" in str(other)


@pytest.fixture
def url(redis_server: Any) -> str:
    return str(redis_server.url)


def _connections(
    url: str, limit: int = 4, timeout: float | None = 5.0, name: str | None = None
) -> AsyncConnections:
    import redis.asyncio

    pool = redis.asyncio.ConnectionPool.from_url(url, protocol=2, client_name=name)
    return AsyncConnections(pool.make_connection, limit, timeout)


def test_a_call_reuses_an_idle_connection(url: str) -> None:
    async def main() -> None:
        connections = _connections(url)
        first = await connections.call(CLIENT_ID)
        assert await connections.call(CLIENT_ID) == first

    asyncio.run(main())


def test_a_command_interrupted_mid_reply_never_leaves_its_connection_in_use(url: str) -> None:
    """A cancelled (or timed-out) command's reply may still come: the connection it went
    out on is closed, so the next command can never read that reply as its own."""
    key = f"never-pushed:{uuid.uuid4().hex}"

    async def main() -> None:
        connections = _connections(url, limit=1)
        before = await connections.call(CLIENT_ID)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(connections.call(BLPOP.pack((key, 0.3))), 0.05)
        started = time.monotonic()
        after = await connections.call(CLIENT_ID)
        assert isinstance(after, int) and after != before  # a new connection, in step
        assert time.monotonic() - started < 0.25  # not queued behind the old BLPOP

    asyncio.run(main())


def test_the_socket_timeout_bounds_a_reply_that_never_comes(url: str) -> None:
    key = f"never-pushed:{uuid.uuid4().hex}"

    async def main() -> None:
        connections = _connections(url, limit=1, timeout=0.2)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await connections.call(BLPOP.pack((key, 2)))
        assert time.monotonic() - started < 1.5
        assert isinstance(await connections.call(CLIENT_ID), int)

    asyncio.run(main())


def test_callers_past_the_limit_wait_for_a_connection_within_the_timeout(url: str) -> None:
    key = f"never-pushed:{uuid.uuid4().hex}"
    watcher = redis.Redis.from_url(url)

    async def main() -> None:
        name = f"limit-{uuid.uuid4().hex[:8]}"
        connections = _connections(url, limit=2, timeout=2.0, name=name)
        slow = [BLPOP.pack((key, 0.2)) for _ in range(5)]
        started = time.monotonic()
        replies = await asyncio.gather(*(connections.call(packed) for packed in slow))
        assert replies == [None] * 5
        # two at a time: three rounds of 0.2 s
        assert time.monotonic() - started >= 0.55
        assert len([c for c in watcher.client_list() if c["name"] == name]) == 2

        # Waiting for a place is bounded by the socket timeout too: behind one slow
        # command, the second caller gets the place; the third's time runs out first.
        tight = _connections(url, limit=1, timeout=0.1)
        outcomes = await asyncio.gather(
            *(tight.call(BLPOP.pack((key, 1))) for _ in range(3)), return_exceptions=True
        )
        assert isinstance(outcomes[0], TimeoutError)
        assert any(
            isinstance(o, redis.exceptions.ConnectionError) and "max_connections" in str(o)
            for o in outcomes
        )

    asyncio.run(main())


def test_an_idle_connection_the_server_closed_is_replaced_not_an_outage(url: str) -> None:
    """As on the blocking path: the next lock operation, even one never retried (release),
    reconnects and succeeds, with or without the loop having run since the close."""
    watcher = redis.Redis.from_url(url)
    kit = LockKit(url, namespace=f"t{uuid.uuid4().hex[:8]}", ttl=5)

    async def main(let_loop_run: bool) -> None:
        lock = kit.lock("idle")
        assert await lock.aacquire()
        for client in watcher.client_list():
            if client["cmd"] == "evalsha":
                watcher.client_kill_filter(_id=client["id"])
        if let_loop_run:
            await asyncio.sleep(0.05)
        else:
            time.sleep(0.05)  # the close has arrived; the loop has not seen it
        await lock.arelease()
        assert kit.admin.info("idle") is None

    try:
        asyncio.run(main(True))
        asyncio.run(main(False))
    finally:
        kit.close()


def test_a_script_the_server_lost_is_loaded_again(url: str) -> None:
    watcher = redis.Redis.from_url(url)
    kit = LockKit(url, namespace=f"t{uuid.uuid4().hex[:8]}", ttl=5)

    async def main() -> None:
        async with kit.lock("a"):
            pass
        watcher.script_flush()
        async with kit.lock("a") as held:
            assert held.token is not None

    try:
        asyncio.run(main())
    finally:
        kit.close()


def test_a_kit_made_from_a_url_holds_its_connections_and_closes_them(url: str) -> None:
    """The pool of a kit made from a URL is the kit's own (only ``LockKit.from_redis`` shares
    the app's): its lock operations keep their connections between calls, and ``close()``
    closes them."""
    watcher = redis.Redis.from_url(url)
    name = f"own-{uuid.uuid4().hex[:8]}"
    kit = LockKit(f"{url}?client_name={name}", namespace=name, ttl=5)

    def ids() -> set[int]:
        return {int(c["id"]) for c in watcher.client_list() if c["name"] == name}

    with kit.lock("a"):
        pass
    first = ids()
    with kit.lock("a"):
        pass
    assert ids() == first  # the same connection, not one checked out of the pool per call
    kit.close()
    for _ in range(100):  # the server notices the close a moment later
        if not ids():
            break
        time.sleep(0.01)
    else:
        pytest.fail(f"the closed kit's connections are still open: {sorted(ids())}")
