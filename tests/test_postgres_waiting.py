"""Waiting on ``postgresql://``: one waiter per key listens, the rest queue on the server
without a statement, a release reaches them one by one, and a killed waiter blocks nobody."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from holders import START_WITHIN, Holder
from polling import wait_until

from lockkit_core import LockKit
from lockkit_core.testing import PostgresServer

pytestmark = pytest.mark.postgresql


@pytest.fixture
def namespace() -> str:
    return f"wait{uuid.uuid4().hex[:10]}"


@pytest.fixture
def kit(postgres_server: PostgresServer, namespace: str) -> Iterator[LockKit]:
    made = LockKit(postgres_server.url, namespace=namespace, ttl=30)
    yield made
    made.close()


def _sessions(server: PostgresServer) -> dict[str, int]:
    """lockkit's sessions by what they wait for: 'advisory' (queued in a waiting room) or
    'other' (listening, idle, working)."""
    with psycopg.connect(server.url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT wait_event FROM pg_stat_activity "
            "WHERE application_name = 'lockkit' AND pid <> pg_backend_pid()"
        ).fetchall()
    found = {"advisory": 0, "other": 0}
    for (event,) in rows:
        found["advisory" if event == "advisory" else "other"] += 1
    return found


def _rooms_held(server: PostgresServer) -> int:
    """How many waiting rooms lockkit's sessions hold (each held by its key's head waiter)."""
    with psycopg.connect(server.url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_locks JOIN pg_stat_activity USING (pid) "
            "WHERE locktype = 'advisory' AND granted AND application_name = 'lockkit'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_waiters_queue_on_the_server_and_each_release_reaches_one(
    postgres_server: PostgresServer, kit: LockKit, namespace: str
) -> None:
    holder = kit.lock("q")
    assert holder.acquire()
    order: list[int] = []
    inside = [0]
    overlaps = [0]
    kits = [LockKit(postgres_server.url, namespace=namespace, ttl=30) for _ in range(5)]

    def wait(i: int) -> None:
        with kits[i].lock("q", timeout=20):
            inside[0] += 1
            overlaps[0] += inside[0] > 1
            order.append(i)
            time.sleep(0.05)
            inside[0] -= 1

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(5)]
    try:
        for thread in threads:
            thread.start()
        # four wait in the room's queue inside the server; one listens
        wait_until(lambda: _sessions(postgres_server)["advisory"] == 4, 5.0)
        holder.release()
        for thread in threads:
            thread.join(20)
        assert sorted(order) == list(range(5))
        assert overlaps == [0]
    finally:
        for made in kits:
            made.close()


@pytest.mark.slow
def test_a_killed_waiter_at_the_head_blocks_nobody(
    postgres_server: PostgresServer, kit: LockKit, namespace: str
) -> None:
    held = kit.lock("k")
    assert held.acquire()
    head = Holder(postgres_server.url, namespace, "k", ttl=30.0, auto_renew=True)
    other = LockKit(postgres_server.url, namespace=namespace, ttl=30)
    got: list[float] = []
    try:
        # The process is up and waiting at the head: it holds the key's room (an interpreter
        # start on a loaded machine can take far longer than any fixed sleep).
        wait_until(lambda: _rooms_held(postgres_server) == 1, START_WITHIN)
        waiting = threading.Thread(
            target=lambda: (
                got.append(time.monotonic()) if other.lock("k").acquire(timeout=15) else None
            )
        )
        waiting.start()
        wait_until(
            lambda: _sessions(postgres_server)["advisory"] >= 1, 5.0
        )  # queued behind the head
        head.signal(signal.SIGKILL)
        head.proc.wait(5)
        # The server ended the killed head's session and the room passed to the waiter.
        wait_until(lambda: _sessions(postgres_server)["advisory"] == 0, 5.0)
        held.release()
        released = time.monotonic()
        waiting.join(15)
        assert got, "the waiter behind the killed one never got the lock"
        assert got[0] - released < 1.0, f"got it {got[0] - released:.2f} s after the release"
    finally:
        head.close()
        other.close()


def test_the_head_waiter_holds_within_one_round_trip_of_the_release(
    postgres_server: PostgresServer, kit: LockKit, namespace: str
) -> None:
    """The release's NOTIFY reaches the listening waiter with no statement of its own; its
    one attempt takes the lock. Counted from libpq's trace of the waiter's two connections
    (the pool's, for attempts, and the listener's)."""
    from benchmarks.pg_trace import traced_connection

    holder = kit.lock("h")
    assert holder.acquire()
    other = LockKit(postgres_server.url, namespace=namespace, ttl=30)
    backend: Any = other.backend
    attempts_conn, _ = backend._pool.take("trace")
    listen_conn, _ = backend._listeners.take("trace")
    try:
        with (
            traced_connection(attempts_conn) as attempts,
            traced_connection(listen_conn) as listens,
        ):
            backend._pool.give(attempts_conn)
            backend._listeners.give(listen_conn)
            waiter = other.lock("h", reentrant=False)
            got: list[bool] = []
            thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=20)))
            thread.start()
            time.sleep(1.0)  # it tried once and listens at the head of the room, silent
            holder.release()
            thread.join(20)
            assert got == [True]
            for conn in (attempts_conn, listen_conn):
                conn.pgconn.untrace()  # flushes libpq's trace file
            # attempts: two before waiting (the first, and one after LISTEN so a release in
            # between is not missed), then exactly one after the notice: no polling in the
            # second it waited, the grant one round trip after the release
            assert attempts.count() == 3
            # listener: LISTEN with a look at the room, and leaving the room once it holds
            assert listens.count() == 2
            waiter.release()
    finally:
        other.close()
