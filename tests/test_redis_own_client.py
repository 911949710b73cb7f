"""``LockKit.from_redis(client)``: locks on a redis-py client the app built, sharing its pool."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
import redis

from lockkit_core import ConfigError, LockKit
from lockkit_core.testing.redis_tls import TlsRedisServer

pytestmark = pytest.mark.redis


def _named(server_port: int, name: str) -> int:
    clients = redis.Redis(port=server_port).client_list()
    return sum(1 for c in clients if c.get("name") == name)


def test_lock_connections_count_once_in_the_apps_pool(redis_server: Any) -> None:
    name = f"app{uuid.uuid4().hex[:8]}"
    # One connection in the app's pool: the lock operations, the app's own commands and
    # both threads below all share it (a lock client that kept it would starve the app).
    pool = redis.BlockingConnectionPool(
        host="127.0.0.1", port=redis_server.port, max_connections=1, timeout=5, client_name=name
    )
    client = redis.Redis(connection_pool=pool)
    kit = LockKit.from_redis(client, namespace=name, ttl=5)
    try:
        got: list[bool] = []
        with kit.lock("order:7") as held:
            assert held.token is not None
            assert client.incr(f"{name}:hits") == 1  # the app's command, while we hold it
            other = kit.lock("order:7", reentrant=False)
            waiter = threading.Thread(target=lambda: got.append(other.acquire(timeout=10)))
            waiter.start()
            queue = f"lockkit:{{{name}:order:7}}:q"
            for _ in range(500):
                if client.zcard(queue):
                    break
                threading.Event().wait(0.01)
            # the app's pool: one connection; the listener: one of its own, same settings
            assert _named(redis_server.port, name) == 2
        waiter.join(10)
        assert got == [True]  # handed over through the listener's connection
        other.release()
        assert kit.admin.info("order:7") is None
    finally:
        kit.close()
    assert client.get(f"{name}:hits") == b"1"  # close() left the app's client open
    client.close()


def test_asyncio_locks_on_the_apps_client(redis_server: Any) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, db=0)
    kit = LockKit.from_redis(client, namespace=f"a{uuid.uuid4().hex[:8]}", ttl=5)

    async def main() -> list[int]:
        order: list[int] = []

        async def one(n: int) -> None:
            async with kit.lock("k", timeout=5):
                order.append(n)
                await asyncio.sleep(0.01)
                order.append(n)

        await asyncio.gather(*(one(n) for n in range(4)))
        return order

    order = asyncio.run(main())
    # never two inside at once: each entry is followed by its own exit
    assert [order[i] for i in range(0, 8, 2)] == [order[i] for i in range(1, 8, 2)]
    kit.close()
    client.close()


def test_the_apps_tls_client_with_an_acl_user(tls_server: TlsRedisServer) -> None:
    client = redis.Redis(
        host="127.0.0.1",
        port=tls_server.tls_port,
        ssl=True,
        username=tls_server.user,
        password=tls_server.password,
        **tls_server.client_options,  # type: ignore[arg-type]
    )
    kit = LockKit.from_redis(client, namespace="owntls", ttl=5)
    assert kit.backend.url.scheme == "rediss"
    assert tls_server.password not in repr(kit)
    with kit.lock("x") as held:
        assert not kit.lock("x", reentrant=False).acquire(timeout=0.05)
        assert held.token is not None

    async def main() -> int | None:
        async with kit.lock("y") as held:
            return held.token

    assert asyncio.run(main()) is not None
    kit.close()
    client.close()


def test_from_redis_refuses_what_is_not_a_redis_client() -> None:
    with pytest.raises(ConfigError, match=r"redis\.Redis"):
        LockKit.from_redis("redis://127.0.0.1:6379/0")
