"""The lock operations' command path: packing, held connections, threads, fork, errors."""

from __future__ import annotations

import gc
import os
import threading
import time
import uuid
import weakref
from typing import Any

import pytest
import redis
from forking import in_child
from redis.connection import PythonRespSerializer
from redis.exceptions import DataError, NoScriptError

from lockkit_core import LockKit
from lockkit_core.backends.redis.wire import Connections, Packer, connections_for

pytestmark = pytest.mark.redis

CLIENT_ID = Packer(("CLIENT", "ID")).pack(())


@pytest.fixture
def client(redis_server: Any) -> redis.Redis:
    return redis.Redis.from_url(redis_server.url)


@pytest.mark.parametrize(
    "head, parts",
    [
        (("EVALSHA", "a" * 40, 4), ("lockkit:{ns:k}", "lockkit:fence", "ключ", b"\x00\xff")),
        (("EVALSHA", "b" * 40, 1), ("k", "c" * 32, 30000, 1.5, -7, "")),
        (("FCALL", "lockkit_acquire", 2), ("k1", "k2", 0)),
        (("CLIENT", "ID"), ()),
    ],
)
def test_packed_commands_are_byte_for_byte_redis_pys(
    head: tuple[Any, ...], parts: tuple[Any, ...]
) -> None:
    theirs = PythonRespSerializer(6000, redis.connection.Encoder("utf-8", "strict", False).encode)
    assert Packer(head).pack(parts) == b"".join(theirs.pack(*head, *parts))


@pytest.mark.parametrize(
    "parts",
    [
        ("lockkit:{ns:run}", "lockkit:{ns:run}:q", "begin", "a" * 40, "30000", "host pid 7", ""),
        ("lockkit:{ns:ключ}", "ключ:q", "end", "0"),  # not ASCII: character and byte counts differ
        (),
    ],
)
def test_text_parts_are_packed_byte_for_byte_as_redis_py_packs_them(parts: tuple[str, ...]) -> None:
    theirs = PythonRespSerializer(6000, redis.connection.Encoder("utf-8", "strict", False).encode)
    head = ("EVALSHA", "c" * 40, 2)
    assert Packer(head).pack_text(parts) == b"".join(theirs.pack(*head, *parts))


def test_what_redis_py_refuses_to_send_is_refused_with_its_error() -> None:
    packer = Packer(("EVALSHA", "a" * 40, 1))
    for bad in (True, None, object()):
        with pytest.raises(DataError, match="Invalid input of type"):
            packer.pack(("k", bad))


def test_replies_and_error_replies_come_back_as_redis_py_gives_them(client: redis.Redis) -> None:
    connections = Connections(client.connection_pool)
    echo = Packer(("ECHO",))
    assert connections.call(echo.pack(("hello",))) == b"hello"
    with pytest.raises(NoScriptError):
        connections.call(Packer(("EVALSHA", "0" * 40, 0)).pack(()))
    # the error reply was read whole: the next call gets its own answer
    assert connections.call(echo.pack(("again",))) == b"again"


def test_a_call_reuses_an_idle_connection(client: redis.Redis) -> None:
    connections = Connections(client.connection_pool)
    first = connections.call(CLIENT_ID)
    assert connections.call(CLIENT_ID) == first


def test_threads_in_flight_never_share_a_connection(client: redis.Redis) -> None:
    connections = Connections(client.connection_pool)
    key = f"wire:{uuid.uuid4().hex}"
    blocked_on = connections.call(CLIENT_ID)  # the connection the blocking call will take
    popped: list[Any] = []
    waiting = threading.Thread(
        target=lambda: popped.append(connections.call(Packer(("BLPOP",)).pack((key, 5))))
    )
    waiting.start()
    # BLPOP holds its connection server-side; wait until the server says so
    watcher = redis.Redis(connection_pool=client.connection_pool)
    for _ in range(200):
        if any(int(c["id"]) == blocked_on and c["cmd"] == "blpop" for c in watcher.client_list()):
            break
        time.sleep(0.01)
    else:
        pytest.fail("the blocking call never reached the server")
    other = connections.call(CLIENT_ID)
    assert other != blocked_on
    assert connections.call(Packer(("RPUSH",)).pack((key, "item"))) == 1
    waiting.join(5)
    assert popped == [[key.encode(), b"item"]]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_never_uses_its_parents_connection(client: redis.Redis) -> None:
    connections = Connections(client.connection_pool)
    parents = connections.call(CLIENT_ID)
    # The child's failure, whatever it is (its exception, an exit without a word, a hang on
    # a lock another thread held at the fork), fails the test with what the child saw.
    childs = in_child(lambda: connections.call(CLIENT_ID), "os.fork")
    assert isinstance(childs, int) and childs != parents
    assert connections.call(CLIENT_ID) == parents  # and the parent's is still in step


def test_a_dropped_clients_held_connections_are_closed(redis_server: Any) -> None:
    watcher = redis.Redis.from_url(redis_server.url)
    client = redis.Redis.from_url(redis_server.url)
    held = connections_for(client).call(CLIENT_ID)
    assert any(int(c["id"]) == held for c in watcher.client_list())
    gone = weakref.ref(client.connection_pool)
    del client
    gc.collect()
    assert gone() is None
    for _ in range(100):  # the server notices the close a moment later
        if all(int(c["id"]) != held for c in watcher.client_list()):
            break
        time.sleep(0.01)
    else:
        pytest.fail("the held connection of a dropped client is still open")


def test_a_connection_the_server_closed_while_idle_is_replaced_not_an_outage(
    redis_server: Any,
) -> None:
    """An idle connection can be closed under us (a server ``timeout``, a restart, a proxy):
    the next lock operation, even one that is never retried, reconnects and succeeds."""
    watcher = redis.Redis.from_url(redis_server.url)
    kit = LockKit(redis_server.url, namespace=f"t{uuid.uuid4().hex[:8]}", ttl=5)
    try:
        lock = kit.lock("idle")
        lock.acquire()
        ours = [c for c in watcher.client_list() if c["cmd"] == "evalsha"]
        for client in ours:
            watcher.client_kill_filter(_id=client["id"])
        lock.release()  # not retried by the backend: it must not meet the dead socket
        assert kit.admin.info("idle") is None
    finally:
        kit.close()
