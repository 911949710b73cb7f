"""A 3-member ZooKeeper ensemble on loopback: the leader dies while a key is held and contended."""

from __future__ import annotations

import itertools
import threading
import time
import uuid

import pytest

from lockkit_core import BackendUnavailable, Lock, LockKit, LockLost, LockTimeout
from lockkit_core.testing.zookeeper import ZooKeeperEnsemble

pytestmark = [pytest.mark.zookeeper, pytest.mark.slow]


def test_killing_the_leader_keeps_exclusion_and_rising_tokens(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    url = zookeeper_ensemble.url + "?session_timeout=4&socket_timeout=1"
    namespace = f"ze{uuid.uuid4().hex[:10]}"
    kits = [LockKit(url, namespace=namespace, ttl=5.0) for _ in range(4)]
    guard = threading.Lock()
    inside: dict[int, Lock] = {}
    tokens: list[int] = []  # in the order holders entered
    overlaps: list[str] = []
    told: list[str] = []
    after_kill: list[int] = []
    errors: list[BaseException] = []
    killed = threading.Event()
    stop = threading.Event()

    def work(i: int) -> None:
        kit = kits[i]
        while not stop.is_set():
            lock = kit.lock("shared", timeout=2, on_lost=lambda lk: told.append(lk.key))
            try:
                with lock:
                    with guard:
                        # Anyone still inside must already have been told it lost the lock.
                        overlaps.extend(
                            f"{i} entered while {j} held it"
                            for j, other in inside.items()
                            if not other.lost
                        )
                        inside[i] = lock
                        assert lock.token is not None
                        tokens.append(lock.token)
                        if killed.is_set():
                            after_kill.append(lock.token)
                    time.sleep(0.01)
                    with guard:
                        del inside[i]
            except (BackendUnavailable, LockTimeout, LockLost):
                time.sleep(0.05)  # failing over; a holder that was told let go
            except BaseException as exc:
                errors.append(exc)
                return

    stuck = ""
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(kits))]
    leader = zookeeper_ensemble.leader()
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)
        with guard:
            before_kill = len(tokens)
        zookeeper_ensemble.kill(leader)
        killed.set()
        # A loaded machine can take a few election rounds (each bounded by initLimit).
        deadline = time.monotonic() + 40.0
        while len(after_kill) < 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        if len(after_kill) < 20:
            stuck = zookeeper_ensemble.report()
        stop.set()
        for t in threads:
            t.join(30)
    finally:
        stop.set()
        for kit in kits:
            kit.close()
        zookeeper_ensemble.start(leader)
    assert not errors, errors[0]
    assert not any(t.is_alive() for t in threads)
    assert not overlaps, overlaps[:3]
    assert before_kill > 10, "the key was hardly contended before the leader died"
    assert len(after_kill) >= 20, (
        f"no progress within 40 s after the leader died ({len(after_kill)} holders):\n{stuck}"
    )
    assert all(b > a for a, b in itertools.pairwise(tokens)), "a token went back"
    assert zookeeper_ensemble.leader() is not None
