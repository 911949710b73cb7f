"""A 3-member etcd cluster on loopback: the leader dies under held and contended locks; fair
waiters are served in the order they asked."""

from __future__ import annotations

import base64
import itertools
import threading
import time
import uuid

import pytest
from lost_calls import LostCalls

from lockkit_core import BackendUnavailable, LockKit, LockLost
from lockkit_core.backends.etcd.layout import prefix_end, queue_prefix
from lockkit_core.testing.etcd import EtcdCluster, etcd_request

pytestmark = [pytest.mark.etcd, pytest.mark.slow]

OPTS = "?socket_timeout=1&connect_timeout=0.5"


def test_leader_killed_under_held_and_contended_locks(etcd_cluster: EtcdCluster) -> None:
    namespace = f"cl{uuid.uuid4().hex[:10]}"
    url = etcd_cluster.url + OPTS
    kits = [LockKit(url, namespace=namespace) for _ in range(4)]
    holder_kit = LockKit(url, namespace=namespace)
    lost = LostCalls()
    guard = threading.Lock()
    inside = 0
    overlaps = 0
    tokens: list[int] = []
    outages = 0
    told = 0
    stop = threading.Event()
    errors: list[BaseException] = []

    def contend(kit: LockKit) -> None:
        nonlocal inside, overlaps, outages, told
        while not stop.is_set():
            try:
                with kit.lock("c", ttl=1.5, timeout=5) as held:
                    with guard:
                        inside += 1
                        overlaps += inside > 1
                        assert held.token is not None
                        tokens.append(held.token)
                    time.sleep(0.002)
                    with guard:
                        inside -= 1
            except BackendUnavailable:
                with guard:
                    outages += 1
                time.sleep(0.05)
            except LockLost:
                with guard:
                    told += 1
            except BaseException as exc:
                errors.append(exc)
                return

    held = holder_kit.lock("held", ttl=3.0, auto_renew=True, on_lost=lost)
    assert held.acquire()
    held_token = held.token
    threads = [threading.Thread(target=contend, args=(kit,)) for kit in kits]
    for t in threads:
        t.start()
    leader = -1
    try:
        time.sleep(1.0)
        leader = etcd_cluster.leader()
        before = len(tokens)
        assert before > 0, "no contender got the lock before the leader died"
        etcd_cluster.kill(leader)
        # An election (about 1-2 s), then a holder whose release was lost to it blocks
        # the key until its ttl is seen to pass.
        time.sleep(6.0)
        stop.set()
        for t in threads:
            t.join(15)
        assert not any(t.is_alive() for t in threads), "a contender hung"
        assert not errors, errors[0]
        assert overlaps == 0, "two holders at once across the leader change"
        assert all(a < b for a, b in itertools.pairwise(tokens)), "a token fell"
        assert len(tokens) > before + 5, f"no progress after the kill ({before}, {len(tokens)})"
        # The holder kept its lock through the election, or was told it lost it.
        if lost.calls == 0:
            held.check()
            info = holder_kit.admin.info("held")
            assert info is not None and info.token == held_token
            held.release()
        else:
            with pytest.raises(LockLost):
                held.check()
        # A client whose first member is the dead leader fails over to another.
        alive = next(i for i in range(3) if i != leader)
        first_dead = (
            f"etcd://127.0.0.1:{etcd_cluster.port(leader)},"
            f"127.0.0.1:{etcd_cluster.port(alive)}{OPTS}"
        )
        with LockKit(first_dead, namespace=namespace) as kit, kit.lock("c", timeout=5) as again:
            assert again.token is not None and again.token > tokens[-1]
    finally:
        stop.set()
        for t in threads:
            t.join(15)
        for kit in [*kits, holder_kit]:
            kit.close()
        if leader >= 0:
            etcd_cluster.start(leader)


def test_fair_waiters_are_served_in_request_order(etcd_cluster: EtcdCluster) -> None:
    namespace = f"fair{uuid.uuid4().hex[:10]}"
    url = etcd_cluster.url + OPTS
    holder_kit = LockKit(url, namespace=namespace)
    kits = [LockKit(url, namespace=namespace) for _ in range(8)]
    queue = queue_prefix(f"{namespace}:fifo")
    order: list[int] = []
    tokens: list[int] = []
    errors: list[BaseException] = []

    def queued() -> int:
        answer = etcd_request(
            etcd_cluster.port(0),
            "kv/range",
            {
                "key": base64.b64encode(queue.encode()).decode(),
                "range_end": base64.b64encode(prefix_end(queue).encode()).decode(),
                "count_only": True,
            },
        )
        return int(answer.get("count", 0))

    def wait_turn(i: int) -> None:
        try:
            with kits[i].lock("fifo", fair=True, timeout=30) as held:
                order.append(i)
                assert held.token is not None
                tokens.append(held.token)
                time.sleep(0.005)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wait_turn, args=(i,)) for i in range(len(kits))]
    try:
        with holder_kit.lock("fifo"):
            for i, t in enumerate(threads):
                t.start()
                deadline = time.monotonic() + 5
                while queued() < i + 1:  # request order: each queued before the next asks
                    assert time.monotonic() < deadline, f"contender {i} never queued"
                    time.sleep(0.005)
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "a fair waiter hung"
        assert not errors, errors[0]
        assert order == list(range(len(kits)))
        assert tokens == sorted(tokens)
        assert queued() == 0, "queue entries were left behind"
    finally:
        for kit in [*kits, holder_kit]:
            kit.close()
