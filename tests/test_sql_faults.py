"""Real faults against a real PostgreSQL and a real MariaDB, one scenario set run on both
lease-table stores: killed and stopped holders, the holder's (and on PostgreSQL a listening
waiter's) sessions ended by the server (``pg_terminate_backend`` / ``KILL``), the server
restarted or stopped, and a black-holed link. Each store's column of the fault table
(docs/results/faults.md) comes from the ``store`` parameter."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Union

import psycopg
import pymysql
import pytest
from dark_link import check_a_dark_link_raises_within_its_timeouts
from holders import (
    check_sigkilled_holder_frees_the_key_within_its_ttl,
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume,
)
from lost_calls import LostCalls
from stopped_store import assert_every_attempt_refused

from lockkit_core import Lock, LockKit
from lockkit_core.testing import PostgresServer, TcpProxy
from lockkit_core.testing.mariadb import MariaDBServer

pytestmark = pytest.mark.slow

FAST = "?socket_timeout=2&connect_timeout=1"

Server = Union[PostgresServer, MariaDBServer]  # noqa: UP007 (a runtime alias)


def _terminate_pg_sessions(server: Server) -> int:
    """End every session lockkit has open on ``server``; how many there were."""
    with psycopg.connect(
        host=server.host, port=server.port, user=server.user, dbname=server.database
    ) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'lockkit' AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def _kill_mysql_connections(server: Server) -> int:
    """``KILL`` every other connection of the lock user; how many there were."""
    admin = pymysql.connect(host=server.host, port=server.port, user=server.user)
    try:
        with admin.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM information_schema.processlist "
                "WHERE user = %s AND id <> CONNECTION_ID()",
                (server.user,),
            )
            ids = [row[0] for row in cursor.fetchall()]
            for found in ids:
                cursor.execute(f"KILL CONNECTION {int(found)}")
    finally:
        admin.close()
    return len(ids)


@dataclass(frozen=True)
class Store:
    """What differs between the two databases in these scenarios."""

    scheme: str
    start: Callable[[], Server]
    #: the server ends the lock user's sessions; how many there were
    end_sessions: Callable[[Server], int]
    #: a lease that outlives a restart (MariaDB's shutdown and InnoDB's start are slower)
    restart_ttl: float
    #: the connect timeout on the black-holed link (libpq's is 2 s at least)
    dark_connect_timeout: float


STORES = {
    "postgres": Store("postgresql", PostgresServer, _terminate_pg_sessions, 8.0, 2.0),
    "mysql": Store("mysql", MariaDBServer, _kill_mysql_connections, 15.0, 0.5),
}
POSTGRES_ONLY = pytest.mark.parametrize(
    "store", [pytest.param("postgres", marks=pytest.mark.postgresql)], indirect=True
)


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("postgres", marks=pytest.mark.postgresql),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ],
)
def store(request: pytest.FixtureRequest) -> Store:
    """The database under test (its id names the fault table's column)."""
    return STORES[request.param]


@pytest.fixture(scope="module")
def own_server(store: Store) -> Iterator[Server]:
    """A server of this module's own, to restart, stop and end sessions on."""
    server = store.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def namespace() -> str:
    return f"fault{uuid.uuid4().hex[:10]}"


def _url(server: Server) -> str:
    return server.url + FAST


@pytest.fixture
def direct(own_server: Server, namespace: str) -> Iterator[LockKit]:
    kit = LockKit(_url(own_server), namespace=namespace, ttl=5)
    yield kit
    kit.close()


@dataclass
class _Held:
    """A renewed lock taken on a kit of its own, and its on_lost count."""

    kit: LockKit
    lock: Lock
    token: int
    lost: LostCalls


@pytest.fixture
def hold(own_server: Server, namespace: str) -> Iterator[Callable[[str, float], _Held]]:
    """``hold(key, ttl)``: take ``key`` with renewals on a kit closed after the test."""
    kits: list[LockKit] = []

    def take(key: str, ttl: float) -> _Held:
        kit = LockKit(_url(own_server), namespace=namespace)
        kits.append(kit)
        lost = LostCalls()
        lock = kit.lock(key, ttl=ttl, auto_renew=True, on_lost=lost)
        assert lock.acquire()
        assert lock.token is not None
        return _Held(kit, lock, lock.token, lost)

    yield take
    for kit in kits:
        kit.close()


# -- holder processes ------------------------------------------------------------------------


@pytest.mark.fault("holder-killed", "freed")
def test_sigkilled_holder_frees_the_key_within_its_ttl(
    own_server: Server, direct: LockKit, namespace: str
) -> None:
    check_sigkilled_holder_frees_the_key_within_its_ttl(_url(own_server), direct, namespace)


@pytest.mark.fault("holder-paused", "lost-and-told")
def test_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
    own_server: Server, direct: LockKit, namespace: str
) -> None:
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
        _url(own_server), direct, namespace
    )


# -- sessions ended under a holder and a waiter ----------------------------------------------


@pytest.mark.fault("session-ended", "held")
def test_ended_sessions_neither_lose_nor_leak_the_lock(
    store: Store, own_server: Server, direct: LockKit, hold: Callable[[str, float], _Held]
) -> None:
    """The lease lives in the table, not in a session: the holder's connections ended by the
    server cost it nothing (the watchdog renews on a new connection), nobody else gets the
    key meanwhile, and its release frees the key for a higher token."""
    held = hold("t", 1.0)
    assert direct.lock("t").acquire(blocking=False) is False  # direct has a session too
    assert store.end_sessions(own_server) >= 2
    end = time.monotonic() + 2.5  # well past the 1 s ttl: only renewals keep it
    while time.monotonic() < end:
        assert direct.lock("t").acquire(blocking=False) is False
        if time.monotonic() > end - 2.0:
            store.end_sessions(own_server)
        time.sleep(0.2)
    held.lock.check()
    held.lock.release()
    assert held.lost.calls == 0
    with direct.lock("t", timeout=0) as again:
        assert again.token is not None and again.token > held.token


@POSTGRES_ONLY
@pytest.mark.fault("session-ended", "held")
def test_a_waiter_whose_session_is_ended_still_gets_the_lock_on_release(
    store: Store, own_server: Server, direct: LockKit, namespace: str
) -> None:
    """A blocked waiter's listening session is terminated: it listens again on a new one and
    is still woken by the release (not by its 10 s lease running out)."""
    holder = direct.lock("w", ttl=10.0)
    assert holder.acquire()
    other = LockKit(_url(own_server), namespace=namespace)
    got: list[float] = []
    try:

        def wait_for_it() -> None:
            with other.lock("w", timeout=8):
                got.append(time.monotonic())

        thread = threading.Thread(target=wait_for_it)
        thread.start()
        time.sleep(0.5)  # the waiter is listening
        assert store.end_sessions(own_server) >= 1
        time.sleep(0.5)  # it has listened again
        holder.release()
        released = time.monotonic()
        thread.join(10)
        assert got, "the waiter never got the lock"
        assert got[0] - released < 0.5, f"woken {got[0] - released:.2f} s after the release"
    finally:
        other.close()


# -- the server restarts and stops -----------------------------------------------------------


@pytest.mark.fault("server-restart", "held")
def test_server_restart_while_held_keeps_the_lock_and_the_tokens_rising(
    store: Store, own_server: Server, namespace: str, hold: Callable[[str, float], _Held]
) -> None:
    """The lease table and the fence counter survive a restart: a holder whose lease outlives
    the outage keeps its lock, nobody else gets it, and later tokens are higher."""
    held = hold("r", store.restart_ttl)
    port = own_server.port
    own_server.stop()
    own_server.start()
    if own_server.port != port:
        pytest.skip("the port was taken while the server was down")
    with LockKit(_url(own_server), namespace=namespace) as other:
        assert other.lock("r").acquire(blocking=False) is False
        held.lock.extend()
        held.lock.release()
        assert held.lost.calls == 0
        with other.lock("r", timeout=2) as again:
            assert again.token is not None and again.token > held.token


@pytest.mark.fault("server-stopped", "refused")
def test_stopped_server_raises_backend_unavailable_quickly(
    own_server: Server, namespace: str
) -> None:
    with LockKit(_url(own_server), namespace=namespace, ttl=5) as kit:
        with kit.lock("warm"):
            pass  # the pool now holds a connection that the stop breaks
        own_server.stop()
        try:
            assert_every_attempt_refused(kit, own_server.port, 1.0 + 1.0)
        finally:
            own_server.start()


@pytest.mark.fault("server-hung", "refused")
def test_black_holed_link_raises_and_abandoned_attempts_are_given_back(
    store: Store, own_server: Server, direct: LockKit, namespace: str
) -> None:
    """A waiter whose link goes dark mid-wait, and callers on a dark link, raise
    BackendUnavailable within their timeout plus the socket (or connect) timeout; the
    attempts held back in the link, which find the key free when it heals, are given back
    by the kit, not held for their ttl by nobody."""
    with TcpProxy("127.0.0.1", own_server.port) as proxy:
        url = (
            f"{store.scheme}://{own_server.user}@127.0.0.1:{proxy.port}/{own_server.database}"
            f"?socket_timeout=0.5&connect_timeout={store.dark_connect_timeout}"
        )
        with LockKit(url, namespace=namespace, ttl=5) as far:
            holder = direct.lock("dark")
            assert holder.acquire()
            check_a_dark_link_raises_within_its_timeouts(
                far, proxy, "dark", socket_timeout=0.5, reconnect=store.dark_connect_timeout
            )
            # Released before the link heals, so the attempts held back in it find the key
            # free when they arrive: the kit gives their grants back by itself (their
            # callers are gone), or the key would be held for a 5 s ttl by nobody.
            holder.release()
            proxy.heal()
            with far.lock("dark", timeout=3) as held:
                assert held.owned()
