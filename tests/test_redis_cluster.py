"""``redis+cluster://`` on a real 3-master, 3-replica cluster: hand-over notices on sharded
pub/sub in the key's slot, 1,000 keys over every master with exclusion across processes, and
a master failover."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
from place_queues import waiting_for_places
from polling import wait_until
from redis.cluster import ClusterNode, RedisCluster

from lockkit_core import BackendUnavailable, ConfigError, LockKit
from lockkit_core.backends.base import Grade
from lockkit_core.testing.redis_cluster import RedisClusterDeployment

pytestmark = pytest.mark.redis

WORKER = Path(__file__).with_name("cluster_worker_process.py")
#: a master's death noticed (1 s node timeout), its replica elected, the slots learnt again
FOLLOW_WITHIN = 15.0


def _data(cluster: RedisClusterDeployment) -> RedisCluster:
    return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", s.port) for s in cluster.masters()])


def test_hand_over_notices_go_over_sharded_pub_sub_in_the_keys_slot(
    redis_cluster: RedisClusterDeployment,
) -> None:
    namespace = f"c{uuid.uuid4().hex[:8]}"
    first = LockKit(redis_cluster.url, namespace=namespace, ttl=30)
    second = LockKit(redis_cluster.url, namespace=namespace, ttl=30)
    assert first.backend.grade is Grade.REPLICATED_ASYNC
    try:
        held = first.lock("order:5")
        assert held.acquire(timeout=0)
        other = second.lock("order:5", reentrant=False)
        got: list[bool] = []
        waiter = threading.Thread(target=lambda: got.append(other.acquire(timeout=20)))
        waiter.start()
        record = f"lockkit:{{{namespace}:order:5}}"
        owner = redis.Redis(port=redis_cluster.master_of(record).port)
        channels: list[bytes] = []
        for _ in range(500):
            channels = owner.execute_command("PUBSUB", "SHARDCHANNELS", record + ":w:*")
            if channels:
                break
            time.sleep(0.01)
        # the waiting process listens on a channel in the lock's slot, on the slot's master
        assert len(channels) == 1
        for server in redis_cluster.masters():  # and on no cluster-wide channel anywhere
            assert redis.Redis(port=server.port).pubsub_channels("lockkit:*") == []
        released = time.monotonic()
        held.release()
        waiter.join(20)
        # told at once (its lease had 30 s to run): the SPUBLISH reached it
        assert got == [True] and time.monotonic() - released < 5.0
        other.release()
    finally:
        first.close()
        second.close()


def test_a_thousand_keys_over_every_master_exclude_across_processes(
    redis_cluster: RedisClusterDeployment,
) -> None:
    namespace = f"m{uuid.uuid4().hex[:8]}"
    keys = 1000
    start = time.time() + 3.0  # every process has started (and connected) by then
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), redis_cluster.url, namespace, str(keys), str(start)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], outputs
    assert [out.strip() for out in outputs] == ["overlaps 0"] * 3
    data = _data(redis_cluster)
    visits = [f"{{{namespace}:k{n}}}:visits" for n in range(keys)]
    assert [int(v) for v in data.mget_nonatomic(visits)] == [3] * keys
    # the keys spread over (nearly) every slot range, so over every master
    slots = {data.keyslot(key) for key in visits}
    assert len(slots) > 900  # ~970 expected: 1,000 keys hashed over 16,384 slots
    owners = {data.nodes_manager.get_node_from_slot(slot).name for slot in slots}
    assert len(owners) == 3


def test_locks_survive_a_master_failover_and_new_ones_follow(
    redis_cluster: RedisClusterDeployment,
) -> None:
    namespace = f"f{uuid.uuid4().hex[:8]}"
    # The ttl outlasts a failover on a loaded machine (renewals fail until a replica takes
    # over): the test is about the grant surviving on the promoted replica, not the lease.
    kit = LockKit(redis_cluster.url, namespace=namespace, ttl=15, options={"socket_timeout": 1.0})
    lost = threading.Event()
    try:
        held = kit.lock("job", on_lost=lambda lock: lost.set())
        assert held.acquire(timeout=0)
        token = held.token
        assert token is not None
        record = f"lockkit:{{{namespace}:job}}"
        master = redis_cluster.master_of(record)
        # the grant is on the replica before the master dies (WAIT: one replica has it)
        assert redis.Redis(port=master.port).execute_command("WAIT", 1, 2000) == 1
        master.kill()
        start = time.monotonic()
        taken = None
        while time.monotonic() - start < FOLLOW_WITHIN * 2:
            try:
                if kit.lock("after", reentrant=False).acquire(timeout=0):
                    taken = time.monotonic() - start
                    break
            except BackendUnavailable:
                pass
            time.sleep(0.05)
        assert taken is not None and taken < FOLLOW_WITHIN
        redis_cluster.wait_failover(master)
        # the promoted replica had the grant: the holder keeps it, renewing on the new master
        held.extend()  # raises LockLost if the record were gone
        assert not lost.is_set()
        held.check()
        assert kit.admin.info("job") is not None
        assert not LockKit(redis_cluster.url, namespace=namespace).lock("job").acquire(timeout=0)
        held.release()
        with kit.lock("job") as again:
            assert again.token is not None and again.token > token
    finally:
        kit.close()
        redis_cluster.heal()


def test_cluster_url_errors_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="only db 0"):
        LockKit("redis+cluster://127.0.0.1:7000/3")
    with pytest.raises(ConfigError, match="unknown option 'db'"):
        LockKit("redis+cluster://127.0.0.1:7000/?db=1")


def test_the_apps_cluster_client(redis_cluster: RedisClusterDeployment) -> None:
    import asyncio

    client = _data(redis_cluster)
    kit = LockKit.from_redis(client, namespace=f"o{uuid.uuid4().hex[:8]}", ttl=5)
    assert kit.backend.url.scheme == "redis+cluster"
    assert kit.backend.grade is Grade.REPLICATED_ASYNC
    try:
        with kit.lock("x") as held:
            assert held.token is not None
            assert not kit.lock("x", reentrant=False).acquire(timeout=0)

        async def main() -> list[int]:
            order: list[int] = []

            async def one(n: int) -> None:
                async with kit.lock("y", timeout=10):
                    order.append(n)
                    await asyncio.sleep(0.01)
                    order.append(n)

            await asyncio.gather(*(one(n) for n in range(3)))
            return order

        # asyncio waiters queue and are handed the lock over the sharded listener
        order = asyncio.run(main())
        assert [order[i] for i in range(0, 6, 2)] == [order[i] for i in range(1, 6, 2)]
    finally:
        kit.close()
    assert client.ping()  # close() left the app's client open
    client.close()


def test_read_write_locks_and_semaphores_hand_over_on_the_cluster(
    redis_cluster: RedisClusterDeployment,
) -> None:
    from lockkit_core import LockTimeout

    namespace = f"p{uuid.uuid4().hex[:8]}"
    a, b = (LockKit(redis_cluster.url, namespace=namespace, ttl=30) for _ in range(2))
    try:
        with a.rwlock("doc").read(timeout=1) as r1, b.rwlock("doc").read(timeout=1) as r2:
            assert r1.token is not None and r2.token is not None
            with pytest.raises(LockTimeout), b.rwlock("doc").write(timeout=0.1):
                pass
        reading = a.rwlock("doc").read(timeout=1)
        assert reading.acquire()
        got: list[float] = []

        def write() -> None:
            with b.rwlock("doc").write(timeout=20):
                got.append(time.monotonic())

        writer = threading.Thread(target=write)
        writer.start()
        wait_until(lambda: waiting_for_places(a, "doc") == 1)  # the writer, behind the reader
        released = time.monotonic()
        reading.release()
        writer.join(20)
        # handed over by a notice in the key's slot, long before the reader's 30 s lease
        assert got and got[0] - released < 5.0
        with a.semaphore("exports", limit=2), b.semaphore("exports", limit=2):
            third = a.semaphore("exports", limit=2, timeout=0.1)
            with pytest.raises(LockTimeout), third:
                pass
    finally:
        a.close()
        b.close()
