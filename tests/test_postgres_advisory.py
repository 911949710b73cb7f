"""``postgresql://...?mode=advisory``: PostgreSQL advisory locks (session and transaction scope)
on a real server, and behind a real PgBouncer in transaction pooling mode."""

from __future__ import annotations

import json
import multiprocessing
import queue
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from lockkit_core import LockKit, LockLost, NotSupported
from lockkit_core.cli import cli
from lockkit_core.errors import ConfigError
from lockkit_core.testing import PostgresServer
from lockkit_core.testing.contract.workers import (
    ROUNDS,
    WORKERS,
    acquire_and_exit,
    exclusion_worker,
    init_counter,
    read_counter,
)
from lockkit_core.testing.pgbouncer import PgBouncerServer

pytestmark = [pytest.mark.postgresql, pytest.mark.timeout(240)]


def _ns() -> str:
    return f"adv{uuid.uuid4().hex[:10]}"


def _exclusion(url: str, tmp_path: Path, workers: int = WORKERS, rounds: int = ROUNDS) -> None:
    """``workers`` processes make ``rounds`` increments each of a file counter under a lock."""
    namespace = _ns()
    counter, marker = tmp_path / "counter", tmp_path / "inside"
    init_counter(counter)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(workers)
    results = ctx.Queue()
    args = (url, namespace, "counter", str(counter), str(marker), rounds, start, results)
    procs = [ctx.Process(target=exclusion_worker, args=args, daemon=True) for _ in range(workers)]
    for p in procs:
        p.start()
    reports: list[dict[str, Any]] = []
    for _ in procs:
        reports.append(results.get(timeout=180))
    for p in procs:
        p.join(30)
    errors = [r["error"] for r in reports if "error" in r]
    assert not errors, errors[0]
    assert read_counter(counter)[0] == workers * rounds, "lost updates: two holders at once"
    assert sum(r["overlaps"] for r in reports) == 0


def test_session_locks_exclude_across_processes(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    _exclusion(postgres_server.url + "?mode=advisory", tmp_path)


def test_transaction_locks_exclude_across_processes_behind_pgbouncer(
    pgbouncer: PgBouncerServer, tmp_path: Path
) -> None:
    # smaller than the contract's 8 x 200: every lock here is a transaction through the pooler
    _exclusion(pgbouncer.url() + "?mode=advisory&scope=transaction", tmp_path, 4, 50)


def test_session_scope_behind_a_transaction_pooler_is_refused_with_the_fix(
    pgbouncer: PgBouncerServer,
) -> None:
    kit = LockKit(pgbouncer.url() + "?mode=advisory", namespace=_ns())
    with kit, pytest.raises(ConfigError) as caught:
        kit.lock("k").acquire(timeout=0)
    said = str(caught.value)
    assert "pool_mode=transaction" in said
    assert "scope=transaction" in said


def test_session_locks_work_on_server_sessions_a_session_pooler_hands_on_unreset(
    postgres_server: PostgresServer,
) -> None:
    """A session-mode pooler without a reset query hands the next client the server sessions
    the last one left, with the statements lockkit prepared on them: the next kit's locks
    must not trip over them."""
    with PgBouncerServer(
        postgres_server, pool_mode="session", pool_size=2, server_reset_query=""
    ) as bouncer:
        url = bouncer.url() + "?mode=advisory"
        with LockKit(url, namespace=_ns()) as first, first.lock("a"), first.lock("b"):
            pass  # both server sessions have the statements prepared now
        with LockKit(url, namespace=_ns()) as second:
            a, b = second.lock("a"), second.lock("b")
            assert a.acquire(timeout=0) and b.acquire(timeout=0)
            a.release()
            b.release()


@pytest.mark.parametrize("scope", ["session", "transaction"])
def test_an_ended_session_gives_the_holder_lock_lost_and_on_lost(
    postgres_server: PostgresServer, scope: str
) -> None:
    url = f"{postgres_server.url}?mode=advisory&scope={scope}"
    namespace = _ns()
    lost: list[float] = []
    with LockKit(url, namespace=namespace) as kit, LockKit(url, namespace=namespace) as other:
        lock = kit.lock("k", on_lost=lambda _: lost.append(time.monotonic()))
        assert lock.acquire(timeout=0)
        info = kit.admin.info("k")
        assert info is not None and info.holder is not None
        pid = int(info.holder.rsplit(" ", 1)[1])
        with psycopg.connect(postgres_server.url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        ended = time.monotonic()
        deadline = ended + 5
        while not lost and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lost, "on_lost never ran"
        assert lost[0] - ended < 2.0
        assert lock.lost
        with pytest.raises(LockLost):
            lock.check()
        assert other.lock("k").acquire(timeout=2), "the server freed it with the session"
        with pytest.raises(LockLost):
            lock.release()


def test_a_waiter_is_granted_in_the_server_when_the_holder_releases(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.url + "?mode=advisory"
    namespace = _ns()
    with LockKit(url, namespace=namespace) as kit, LockKit(url, namespace=namespace) as other:
        held = kit.lock("k")
        assert held.acquire(timeout=0)
        assert not other.lock("k").acquire(timeout=0)
        started = time.monotonic()
        assert not other.lock("k").acquire(timeout=0.3)
        assert time.monotonic() - started >= 0.29
        waiter = other.lock("k", reentrant=False)
        got: queue.Queue[float] = queue.Queue()
        thread = threading.Thread(target=lambda: waiter.acquire(timeout=10) and got.put(1.0))
        thread.start()
        time.sleep(0.3)
        held.release()
        assert got.get(timeout=5) == 1.0
        thread.join(5)
        assert kit.admin.info("k") is not None
        waiter.release()
        assert kit.admin.info("k") is None


def test_a_holder_process_that_exits_frees_the_lock(postgres_server: PostgresServer) -> None:
    url = postgres_server.url + "?mode=advisory"
    namespace = _ns()
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=acquire_and_exit, args=(url, namespace, "k", None, results))
    proc.start()
    owner, _ = results.get(timeout=60)
    assert owner not in {"busy", "error"}
    proc.join(30)
    with LockKit(url, namespace=namespace) as kit:
        assert kit.lock("k").acquire(timeout=5)


def test_the_honest_limits_are_errors_at_lock_time(postgres_server: PostgresServer) -> None:
    with LockKit(postgres_server.url + "?mode=advisory", namespace=_ns()) as kit:
        with pytest.raises(NotSupported, match="has no leases"):
            kit.lock("k", ttl=5)
        with pytest.raises(NotSupported, match="cannot adopt"):
            kit.lock("k", owner="0" * 32).acquire(timeout=0)
        with pytest.raises(NotSupported, match="cannot list"):
            kit.admin.list("")
        lock = kit.lock("k")
        assert lock.acquire(timeout=0)
        assert lock.token is None
        with pytest.raises(NotSupported):
            lock.extend(5)
        lock.release()
    with pytest.raises(ConfigError, match="'session' or 'transaction'"):
        LockKit(postgres_server.url + "?mode=advisory&scope=forever")
    with pytest.raises(ConfigError, match="'lease'"):
        LockKit(postgres_server.url + "?mode=adviosry")


def test_lockkit_backends_shows_the_advisory_capabilities() -> None:
    done = CliRunner().invoke(cli, ["backends", "--json"])
    assert done.exit_code == 0, done.output
    rows = {r["scheme"] + r["variant"]: r for r in json.loads(done.output)}
    advisory = rows["postgresql?mode=advisory"]
    assert advisory["grade"] == "single-node"
    assert set(advisory["capabilities"]) == {"notify", "cross_process", "cross_host", "no_lease"}
    assert "ttl" in rows["postgresql"]["capabilities"]
    assert "hand_off" in rows["postgresql"]["capabilities"]


def test_a_child_forked_while_the_session_watcher_is_busy_can_lock(
    postgres_server: PostgresServer,
) -> None:
    """The watcher thread takes its table's lock now and then; a fork at that moment must not
    leave the child waiting for a lock no thread of the child will ever release."""
    import os

    url = f"{postgres_server.url}?mode=advisory"
    with LockKit(url, namespace=_ns()) as kit:
        held = kit.lock("parent")
        assert held.acquire(timeout=0)
        sessions = kit.backend._sessions  # type: ignore[attr-defined]
        busy, done = threading.Event(), threading.Event()

        def watcher_at_work() -> None:  # what the watcher does while it reads its table
            with sessions._lock:
                busy.set()
                done.wait(10)

        thread = threading.Thread(target=watcher_at_work)
        thread.start()
        busy.wait(5)
        pid = os.fork()
        if pid == 0:  # the child: a lock of its own, then out
            lock = kit.lock("child")
            os._exit(0 if lock.acquire(timeout=2) and lock.release() is None else 3)
        done.set()
        thread.join()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            status = None
        assert status == 0, "the forked child hung (or failed) taking a lock"
        held.release()
