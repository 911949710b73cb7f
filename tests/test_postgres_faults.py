"""Real faults against a real PostgreSQL: killed and stopped holders, the holder's and a
waiter's sessions ended by ``pg_terminate_backend``, the server restarted or stopped."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from holders import (
    check_sigkilled_holder_frees_the_key_within_its_ttl,
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume,
)

from lockkit_core import BackendUnavailable, Lock, LockKit
from lockkit_core.testing import PostgresServer, TcpProxy

pytestmark = [pytest.mark.postgresql, pytest.mark.slow]

FAST = "?socket_timeout=2&connect_timeout=1"


@pytest.fixture
def namespace() -> str:
    return f"fault{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def own_server() -> Iterator[PostgresServer]:
    """A PostgreSQL of this module's own, to restart and to end sessions on."""
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


def _url(server: PostgresServer) -> str:
    return server.url + FAST


@pytest.fixture
def direct(own_server: PostgresServer, namespace: str) -> Iterator[LockKit]:
    kit = LockKit(_url(own_server), namespace=namespace, ttl=5)
    yield kit
    kit.close()


def _terminate_lock_sessions(server: PostgresServer) -> int:
    """End every session lockkit has open on ``server``; how many there were."""
    with psycopg.connect(
        host=server.host, port=server.port, user=server.user, dbname=server.database
    ) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'lockkit' AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


class _Lost:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, lock: Lock) -> None:
        self.calls += 1


# -- holder processes ------------------------------------------------------------------------


@pytest.mark.fault("holder-killed", "freed")
def test_sigkilled_holder_frees_the_key_within_its_ttl(
    own_server: PostgresServer, direct: LockKit, namespace: str
) -> None:
    check_sigkilled_holder_frees_the_key_within_its_ttl(_url(own_server), direct, namespace)


@pytest.mark.fault("holder-paused", "lost-and-told")
def test_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
    own_server: PostgresServer, direct: LockKit, namespace: str
) -> None:
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
        _url(own_server), direct, namespace
    )


# -- sessions ended under a holder and a waiter ----------------------------------------------


@pytest.mark.fault("session-ended", "held")
def test_terminated_sessions_neither_lose_nor_leak_the_lock(
    own_server: PostgresServer, direct: LockKit, namespace: str
) -> None:
    """The lease lives in the table, not in a session: the holder's connections ended by
    ``pg_terminate_backend`` cost it nothing (the watchdog renews on a new connection), nobody
    else gets the key meanwhile, and its release frees the key for a higher token."""
    kit = LockKit(_url(own_server), namespace=namespace)
    lost = _Lost()
    try:
        held = kit.lock("t", ttl=1.0, auto_renew=True, on_lost=lost)
        assert held.acquire()
        token = held.token
        assert token is not None
        assert direct.lock("t").acquire(blocking=False) is False  # direct has a session too
        assert _terminate_lock_sessions(own_server) >= 2
        end = time.monotonic() + 2.5  # well past the 1 s ttl: only renewals keep it
        while time.monotonic() < end:
            assert direct.lock("t").acquire(blocking=False) is False
            if time.monotonic() > end - 2.0:
                _terminate_lock_sessions(own_server)
            time.sleep(0.2)
        held.check()
        held.release()
        assert lost.calls == 0
        with direct.lock("t", timeout=0) as again:
            assert again.token is not None and again.token > token
    finally:
        kit.close()


@pytest.mark.fault("session-ended", "held")
def test_a_waiter_whose_session_is_ended_still_gets_the_lock_on_release(
    own_server: PostgresServer, direct: LockKit, namespace: str
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
        assert _terminate_lock_sessions(own_server) >= 1
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
    own_server: PostgresServer, namespace: str
) -> None:
    """The lease table and the fence sequence survive a restart: a holder whose lease outlives
    the outage keeps its lock, nobody else gets it, and later tokens are higher."""
    kit = LockKit(_url(own_server), namespace=namespace)
    lost = _Lost()
    try:
        held = kit.lock("r", ttl=8.0, auto_renew=True, on_lost=lost)
        assert held.acquire()
        token = held.token
        assert token is not None
        port = own_server.port
        own_server.stop()
        own_server.start()
        if own_server.port != port:
            pytest.skip("the port was taken while the server was down")
        other = LockKit(_url(own_server), namespace=namespace)
        try:
            assert other.lock("r").acquire(blocking=False) is False
            held.extend()
            held.release()
            assert lost.calls == 0
            with other.lock("r", timeout=2) as again:
                assert again.token is not None and again.token > token
        finally:
            other.close()
    finally:
        kit.close()


@pytest.mark.fault("server-stopped", "refused")
def test_stopped_server_raises_backend_unavailable_quickly(namespace: str) -> None:
    server = PostgresServer()
    try:
        kit = LockKit(_url(server), namespace=namespace, ttl=5)
        try:
            with kit.lock("warm"):
                pass  # the pool now holds a connection that the stop breaks
            server.stop()
            attempts: list[Callable[[], bool]] = [
                lambda: kit.lock("k").acquire(blocking=False),
                lambda: kit.lock("k", timeout=0.5).acquire(),
                lambda: kit.lock("k").acquire(),  # waits forever for the lock, not the server
            ]
            for attempt in attempts:
                start = time.monotonic()
                with pytest.raises(BackendUnavailable) as caught:
                    attempt()
                assert time.monotonic() - start < 1.0 + 1.0
                assert str(server.port) in str(caught.value)
        finally:
            kit.close()
    finally:
        server.close()


@pytest.mark.fault("server-hung", "refused")
def test_black_holed_link_raises_within_timeout_plus_socket_timeout(
    own_server: PostgresServer, direct: LockKit, namespace: str
) -> None:
    """Callers on a link that goes dark (the proxy accepts and acks, nothing arrives): each
    raises BackendUnavailable within its timeout plus one socket (or connect) timeout, never
    hangs and never returns False; a waiter whose link goes dark mid-wait too."""
    with TcpProxy("127.0.0.1", own_server.port) as proxy:
        url = (
            f"postgresql://{own_server.user}@127.0.0.1:{proxy.port}/{own_server.database}"
            "?socket_timeout=0.5&connect_timeout=2"
        )
        far = LockKit(url, namespace=namespace, ttl=5)
        try:
            holder = direct.lock("dark")
            assert holder.acquire()
            outcome: list[object] = []

            def wait_for_it() -> None:
                start = time.monotonic()
                try:
                    outcome.append(far.lock("dark", timeout=3).acquire())
                except BackendUnavailable as exc:
                    outcome.append(exc)
                outcome.append(time.monotonic() - start)

            waiter = threading.Thread(target=wait_for_it)
            waiter.start()
            time.sleep(0.5)
            proxy.partition()
            waiter.join(3 + 0.5 + 3)
            assert not waiter.is_alive(), "the waiter hung on a dark link"
            assert isinstance(outcome[0], BackendUnavailable), outcome
            assert isinstance(outcome[1], float) and outcome[1] <= 3 + 0.5 + 0.5
            for attempt in (
                lambda: far.lock("dark").acquire(blocking=False),
                lambda: far.lock("dark", timeout=0.4).acquire(),
            ):
                start = time.monotonic()
                with pytest.raises(BackendUnavailable):
                    attempt()
                # a new connection may be needed: libpq's connect timeout is 2 s at least
                assert time.monotonic() - start <= 0.4 + 2.0 + 0.5
            # Released before the link heals, so the attempts held back in it find the key
            # free when they arrive: the kit gives their grants back by itself (their
            # callers are gone), or the key would be held for a 5 s ttl by nobody.
            holder.release()
            proxy.heal()
            with far.lock("dark", timeout=3) as held:
                assert held.owned()
        finally:
            far.close()
