"""``redis+sentinel://``: locks on the master Sentinel names, across a real failover (master
SIGKILLed while idle, and while a lock is held that never reached the replica)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
import redis

from lockkit_core import BackendUnavailable, ConfigError, LockKit, LockLost
from lockkit_core.backends.base import Grade
from lockkit_core.testing import free_port
from lockkit_core.testing.redis_sentinel import SentinelDeployment

pytestmark = pytest.mark.redis

#: how long a failover may take the client to follow: the sentinels' 1 s down-after, their
#: election, and a socket timeout, with room for a loaded machine
FOLLOW_WITHIN = 15.0


def _kit(dep: SentinelDeployment, **kwargs: Any) -> LockKit:
    kwargs.setdefault("namespace", f"s{uuid.uuid4().hex[:8]}")
    return LockKit(dep.url, options={"socket_timeout": 1.0}, **kwargs)


def _first_lock_after(kit: LockKit, key: str, start: float) -> tuple[float, float]:
    """Try ``key`` until it is taken; (seconds since ``start``, longest failed attempt)."""
    longest = 0.0
    while time.monotonic() - start < FOLLOW_WITHIN * 2:
        began = time.monotonic()
        try:
            if kit.lock(key, reentrant=False).acquire(timeout=0):
                return time.monotonic() - start, longest
        except BackendUnavailable:
            longest = max(longest, time.monotonic() - began)
        time.sleep(0.05)
    raise AssertionError(f"no lock within {FOLLOW_WITHIN * 2} s of the failover")


def test_locks_and_hand_over_on_the_master(sentinel_deployment: SentinelDeployment) -> None:
    kit = _kit(sentinel_deployment, ttl=5)
    assert kit.backend.grade is Grade.REPLICATED_ASYNC
    try:
        held = kit.lock("a")
        assert held.acquire(timeout=0)
        other = kit.lock("a", reentrant=False)
        got: list[bool] = []
        waiter = threading.Thread(target=lambda: got.append(other.acquire(timeout=10)))
        waiter.start()
        master = redis.Redis(port=sentinel_deployment.master().port)
        for _ in range(500):
            if master.zcard(f"lockkit:{{{kit.namespace}:a}}:q"):
                break
            time.sleep(0.01)
        held.release()
        waiter.join(10)
        assert got == [True]
        other.release()
    finally:
        kit.close()


def test_sentinel_url_errors_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="mymaster"):
        LockKit("redis+sentinel://127.0.0.1:26379")
    with pytest.raises(ConfigError, match="bad server address"):
        LockKit("redis+sentinel://127.0.0.1:26379,127.0.0.1:x/mymaster/0")


def test_new_locks_after_the_idle_master_is_killed(sentinel_deployment: SentinelDeployment) -> None:
    dep = sentinel_deployment
    kit = _kit(dep, ttl=5)
    try:
        with kit.lock("before"):
            pass
        dead = dep.kill_master()
        start = time.monotonic()
        took, longest = _first_lock_after(kit, "after", start)
        assert took < FOLLOW_WITHIN
        # meanwhile every attempt failed fast and loudly: never a hang, never False
        assert longest < 1.0 + 2.0
        assert dep.master_port() != dead.port
    finally:
        kit.close()
        dep.heal()


def test_a_lock_lost_in_failover_is_reported_and_the_next_token_is_higher(
    sentinel_deployment: SentinelDeployment,
) -> None:
    dep = sentinel_deployment
    lost = threading.Event()
    holder = _kit(dep, ttl=3)
    rival = LockKit(dep.url, namespace=holder.namespace, options={"socket_timeout": 1.0})
    try:
        # Replication lag, made certain: the replica follows a port where nothing listens
        # while the grant is made, and the master dies before the sentinels (which check
        # their replicas' settings every few seconds) point it back. So the grant never
        # reaches the replica that is promoted.
        redis.Redis(port=dep.replica().port).replicaof("127.0.0.1", free_port())
        held = holder.lock("order:9", on_lost=lambda lock: lost.set())
        assert held.acquire(timeout=0)
        token = held.token
        assert token is not None
        dead = dep.kill_master()
        start = time.monotonic()
        dep.wait_failover(dead.port)
        # the watchdog's next renewal finds the record gone (or its deadline passes)
        assert lost.wait(FOLLOW_WITHIN)
        with pytest.raises(LockLost):
            held.check()
        # the promoted replica never saw the grant: the key is granted again...
        took, _ = _first_lock_after(rival, "order:9", start)
        assert took < FOLLOW_WITHIN
        second = rival.admin.info("order:9")
        assert second is not None and second.token is not None
        # ... with a higher fencing token, so a fenced store refuses the first holder
        assert second.token > token
        with pytest.raises(LockLost):
            held.release()
    finally:
        holder.close()
        rival.close()
        dep.heal()


def test_the_apps_sentinel_client_and_asyncio(sentinel_deployment: SentinelDeployment) -> None:
    from redis.sentinel import Sentinel

    dep = sentinel_deployment
    sentinels = Sentinel([("127.0.0.1", port) for port in dep.sentinel_ports])
    client = sentinels.master_for(dep.service, socket_timeout=1.0)
    kit = LockKit.from_redis(client, namespace=f"o{uuid.uuid4().hex[:8]}", ttl=5)
    url_kit = _kit(dep, ttl=5)

    async def main(on: LockKit) -> list[int]:
        order: list[int] = []

        async def one(n: int) -> None:
            async with on.lock("k", timeout=5):
                order.append(n)
                await asyncio.sleep(0.01)
                order.append(n)

        await asyncio.gather(*(one(n) for n in range(3)))
        return order

    try:
        with kit.lock("x"):
            assert not kit.lock("x", reentrant=False).acquire(timeout=0)
        for on in (kit, url_kit):
            order = asyncio.run(main(on))
            assert [order[i] for i in range(0, 6, 2)] == [order[i] for i in range(1, 6, 2)]
    finally:
        kit.close()
        url_kit.close()
        client.close()
