"""redlock:// when nodes fail: one of three down or paused still locks, two down is a clear
error within the timeout, a lost vote is given back, and extension needs a majority. Each test
runs on three redis-servers of its own (``fault_nodes``)."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lockkit_core import LockKit
from lockkit_core.backends.redlock.quorum import Tally, quorum
from lockkit_core.cli import cli
from lockkit_core.errors import BackendUnavailable, ConfigError, LockLost
from lockkit_core.testing.contract.workers import exclusion_worker, init_counter, read_counter
from lockkit_core.testing.redlock import RedlockNodes

pytestmark = pytest.mark.redis

NODE_TIMEOUT = 0.25  # generous: the CI machine is loaded


def _kit(nodes: RedlockNodes, **kwargs: Any) -> LockKit:
    kwargs.setdefault("namespace", "faults")
    kwargs.setdefault("ttl", 10.0)
    return LockKit(nodes.url(f"node_timeout={NODE_TIMEOUT}"), **kwargs)


@pytest.mark.fault("minority-down", "held")
def test_one_node_down_locks_still_exclude(fault_nodes: RedlockNodes) -> None:
    fault_nodes.nodes[1].kill()
    a, b = _kit(fault_nodes), _kit(fault_nodes)
    try:
        first = a.lock("order:1")
        assert first.acquire(timeout=2)
        assert b.lock("order:1").acquire(blocking=False) is False
        first.release()
        with b.lock("order:1", timeout=2) as held:
            assert held.owned() and held.token is None
    finally:
        a.close()
        b.close()


@pytest.mark.fault("minority-down", "held")
def test_one_node_down_excludes_across_processes(fault_nodes: RedlockNodes, tmp_path: Path) -> None:
    fault_nodes.nodes[0].kill()
    counter, marker = tmp_path / "counter", tmp_path / "inside"
    init_counter(counter)
    ctx = multiprocessing.get_context("spawn")
    workers, rounds = 4, 25
    start, results = ctx.Barrier(workers), ctx.Queue()
    url = fault_nodes.url(f"node_timeout={NODE_TIMEOUT}")
    procs = [
        ctx.Process(
            target=exclusion_worker,
            args=(url, "xproc", "counter", str(counter), str(marker), rounds, start, results),
            daemon=True,
        )
        for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    reports = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
    assert not [r["error"] for r in reports if "error" in r]
    assert sum(r["overlaps"] for r in reports) == 0
    assert read_counter(counter)[0] == workers * rounds, "lost updates: two holders at once"


@pytest.mark.fault("server-stopped", "refused")
def test_two_nodes_down_fail_clearly_within_the_timeout(fault_nodes: RedlockNodes) -> None:
    kit = _kit(fault_nodes)
    try:
        fault_nodes.nodes[0].kill()
        fault_nodes.nodes[2].kill()
        began = time.monotonic()
        with pytest.raises(BackendUnavailable) as caught:
            kit.lock("order:2").acquire(timeout=1.0)
        assert time.monotonic() - began < 1.0 + NODE_TIMEOUT + 0.5
        message = str(caught.value)
        assert "1 of 3 nodes answered and 2 must" in message
        assert str(fault_nodes.nodes[0].port) in message
    finally:
        kit.close()


@pytest.mark.fault("minority-down", "held")
def test_a_paused_node_costs_its_timeout_not_the_lock(fault_nodes: RedlockNodes) -> None:
    a, b = _kit(fault_nodes), _kit(fault_nodes)
    try:
        with a.lock("warm"):  # connections to every node exist before the pause
            pass
        fault_nodes.nodes[2].pause()
        began = time.monotonic()
        first = a.lock("order:3")
        assert first.acquire(timeout=5)
        took = time.monotonic() - began
        assert took < 5 * NODE_TIMEOUT, f"acquire took {took:.2f} s with one node paused"
        assert b.lock("order:3").acquire(blocking=False) is False
        first.release()
        assert b.lock("order:3").acquire(timeout=5)
    finally:
        fault_nodes.nodes[2].resume()
        a.close()
        b.close()


def test_a_lost_attempt_is_given_back_on_the_node_that_granted(
    fault_nodes: RedlockNodes,
) -> None:
    """Two nodes held by two other owners, one free: the attempt wins that one vote only and
    must give it back, or it would hold a third of the lock for its whole ttl."""
    singles = [LockKit(node.url, namespace="split", ttl=10.0) for node in fault_nodes.nodes]
    kit = _kit(fault_nodes, namespace="split")
    try:
        assert singles[0].lock("k").acquire(blocking=False)
        assert singles[1].lock("k").acquire(blocking=False)
        assert kit.lock("k").acquire(blocking=False) is False
        assert singles[2].admin.info("k") is None, "the vote of node 2 was kept"
    finally:
        for single in singles:
            single.close()
        kit.close()


@pytest.mark.fault("server-stopped", "refused")
def test_extension_needs_a_majority(fault_nodes: RedlockNodes) -> None:
    kit = _kit(fault_nodes, auto_renew=False)
    try:
        lock = kit.lock("order:4", ttl=5.0)
        assert lock.acquire(timeout=2)
        lock.extend()  # all three answer
        fault_nodes.nodes[0].kill()
        lock.extend()  # two of three still do
        fault_nodes.nodes[1].kill()
        with pytest.raises(BackendUnavailable, match="1 of 3 nodes answered"):
            lock.extend()
    finally:
        kit.close()


@pytest.mark.fault("server-restart", "lost-and-told")
def test_a_minority_does_not_extend(fault_nodes: RedlockNodes) -> None:
    """The lease survives on one node only (two restarted empty): extending answers no, and
    the holder's extend() raises LockLost."""
    kit = _kit(fault_nodes, auto_renew=False)
    try:
        lock = kit.lock("order:5", ttl=5.0)
        assert lock.acquire(timeout=2)
        fault_nodes.nodes[0].restart()
        fault_nodes.nodes[1].restart()
        assert kit.backend.extend(lock.full_key, lock.owner, 5.0) is False
        with pytest.raises(LockLost):  # and the holder is told
            lock.extend()
        assert lock.lost
    finally:
        kit.close()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redlock://127.0.0.1:1,127.0.0.1:2/0", "at least 3"),
        ("redlock://127.0.0.1:1,127.0.0.1:1,127.0.0.1:2/0", "named twice"),
        ("redlock://127.0.0.1:1,127.0.0.1:x,127.0.0.1:2/0", "host:port"),
        ("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0?node_timeout=0", "node_timeout"),
    ],
)
def test_bad_urls_are_config_errors(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        LockKit(url)


def test_tally_counts_a_majority() -> None:
    assert [quorum(n) for n in (3, 4, 5)] == [2, 3, 3]
    assert Tally(3, 2, [100], 0).won
    assert not Tally(3, 1, [100, 200], 0).won
    assert Tally(3, 0, [], 2).unreachable
    assert Tally(3, 1, [100], 1).undecided and not Tally(3, 0, [100], 1).undecided
    # two busy nodes: a majority is free when the first of them ends (plus jitter)
    wait = Tally(3, 0, [300, 900], 0).retry_after()
    assert wait is not None and 0.3 <= wait <= 0.32
    # a majority free already (a split vote given back): a short random pause
    split = Tally(3, 0, [900], 0).retry_after()
    assert split is not None and split <= 0.01


def test_lockkit_backends_shows_redlock_honestly() -> None:
    result = CliRunner().invoke(cli, ["backends", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = [r for r in json.loads(result.output) if r["scheme"] == "redlock"]
    assert row["grade"] == "quorum"
    assert "fencing" not in row["capabilities"] and "fair" not in row["capabilities"]
    assert {"ttl", "notify", "cross_host"} <= set(row["capabilities"])


@pytest.mark.fault("slow-link", "refused")
def test_a_majority_that_took_longer_than_the_ttl_is_not_a_lock(
    fault_nodes: RedlockNodes,
) -> None:
    """Validity is ttl - elapsed - drift from before the first request: with one node paused
    and a node timeout longer than the ttl, the two grants arrive spent; they are given back
    and, after a few such rounds, the caller is told the link is slower than the ttl."""
    kit = LockKit(fault_nodes.url("node_timeout=0.4"), namespace="slow", auto_renew=False)
    try:
        with kit.lock("warm"):
            pass
        fault_nodes.nodes[2].pause()
        with pytest.raises(BackendUnavailable, match="arrived with their lease already over"):
            kit.lock("k", ttl=0.2).acquire(timeout=5)
    finally:
        fault_nodes.nodes[2].resume()
        kit.close()
