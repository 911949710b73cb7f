"""Real faults against a real MariaDB: killed and stopped holders, the holder's connections
ended with ``KILL``, the server restarted or stopped; and the URLs ``mysql://`` refuses."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pymysql
import pytest
from holders import (
    check_sigkilled_holder_frees_the_key_within_its_ttl,
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume,
)

from lockkit_core import BackendUnavailable, ConfigError, Lock, LockKit
from lockkit_core.testing import TcpProxy
from lockkit_core.testing.mariadb import MariaDBServer

pytestmark = [pytest.mark.mysql, pytest.mark.slow]

FAST = "?socket_timeout=2&connect_timeout=1"


@pytest.fixture
def namespace() -> str:
    return f"fault{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def own_server() -> Iterator[MariaDBServer]:
    """A MariaDB of this module's own, to restart and to kill connections on."""
    server = MariaDBServer()
    try:
        yield server
    finally:
        server.close()


def _url(server: MariaDBServer) -> str:
    return server.url + FAST


@pytest.fixture
def direct(own_server: MariaDBServer, namespace: str) -> Iterator[LockKit]:
    kit = LockKit(_url(own_server), namespace=namespace, ttl=5)
    yield kit
    kit.close()


def _kill_lock_connections(server: MariaDBServer) -> int:
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


class _Lost:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, lock: Lock) -> None:
        self.calls += 1


@pytest.mark.fault("holder-killed", "freed")
def test_sigkilled_holder_frees_the_key_within_its_ttl(
    own_server: MariaDBServer, direct: LockKit, namespace: str
) -> None:
    check_sigkilled_holder_frees_the_key_within_its_ttl(_url(own_server), direct, namespace)


@pytest.mark.fault("holder-paused", "lost-and-told")
def test_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
    own_server: MariaDBServer, direct: LockKit, namespace: str
) -> None:
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
        _url(own_server), direct, namespace
    )


@pytest.mark.fault("session-ended", "held")
def test_killed_connections_neither_lose_nor_leak_the_lock(
    own_server: MariaDBServer, direct: LockKit, namespace: str
) -> None:
    """The lease lives in the table: the holder's connections ended with ``KILL`` cost it
    nothing (renewals use new ones), nobody else gets the key, and its release frees it."""
    kit = LockKit(_url(own_server), namespace=namespace)
    lost = _Lost()
    try:
        held = kit.lock("t", ttl=1.0, auto_renew=True, on_lost=lost)
        assert held.acquire()
        token = held.token
        assert token is not None
        assert direct.lock("t").acquire(blocking=False) is False
        assert _kill_lock_connections(own_server) >= 2
        end = time.monotonic() + 2.5  # well past the 1 s ttl: only renewals keep it
        while time.monotonic() < end:
            assert direct.lock("t").acquire(blocking=False) is False
            if time.monotonic() > end - 2.0:
                _kill_lock_connections(own_server)
            time.sleep(0.2)
        held.check()
        held.release()
        assert lost.calls == 0
        with direct.lock("t", timeout=0) as again:
            assert again.token is not None and again.token > token
    finally:
        kit.close()


@pytest.mark.fault("server-restart", "held")
def test_server_restart_while_held_keeps_the_lock_and_the_tokens_rising(
    own_server: MariaDBServer, namespace: str
) -> None:
    kit = LockKit(_url(own_server), namespace=namespace)
    lost = _Lost()
    try:
        held = kit.lock("r", ttl=15.0, auto_renew=True, on_lost=lost)
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
def test_stopped_server_raises_backend_unavailable_quickly(
    own_server: MariaDBServer, namespace: str
) -> None:
    kit = LockKit(_url(own_server), namespace=namespace, ttl=5)
    try:
        with kit.lock("warm"):
            pass  # the pool now holds a connection that the stop breaks
        own_server.stop()
        try:
            attempts: list[Callable[[], bool]] = [
                lambda: kit.lock("k").acquire(blocking=False),
                lambda: kit.lock("k", timeout=0.5).acquire(),
                lambda: kit.lock("k").acquire(),
            ]
            for attempt in attempts:
                start = time.monotonic()
                with pytest.raises(BackendUnavailable) as caught:
                    attempt()
                assert time.monotonic() - start < 1.0 + 1.0
                assert str(own_server.port) in str(caught.value)
        finally:
            own_server.start()
    finally:
        kit.close()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://u@127.0.0.1:3306/", "one database name"),
        ("mysql://u@127.0.0.1:3306/a/b", "one database name"),
        ("mysql://u@127.0.0.1:3306/db?table=x;drop", "not allowed"),
        ("mysql://u@127.0.0.1:3306/db?connect_timeout=0", "positive"),
        ("mysql://u@127.0.0.1:3306/db?colour=red", "unknown option"),
    ],
)
def test_bad_urls_are_config_errors(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        LockKit(url)


@pytest.mark.fault("server-hung", "refused")
def test_black_holed_link_raises_and_abandoned_attempts_are_given_back(
    own_server: MariaDBServer, direct: LockKit, namespace: str
) -> None:
    """Callers on a link that goes dark raise BackendUnavailable within their timeout plus
    the socket (or connect) timeout; the attempts held back in the link, which find the key
    free when it heals, are given back by the kit, not held for their ttl by nobody."""
    with TcpProxy("127.0.0.1", own_server.port) as proxy:
        url = (
            f"mysql://{own_server.user}@127.0.0.1:{proxy.port}/{own_server.database}"
            "?socket_timeout=0.5&connect_timeout=0.5"
        )
        far = LockKit(url, namespace=namespace, ttl=5)
        try:
            holder = direct.lock("dark")
            assert holder.acquire()
            with far.lock("warm"):
                pass  # a pooled connection for the attempts below
            proxy.partition()
            for attempt in (
                lambda: far.lock("dark").acquire(blocking=False),
                lambda: far.lock("dark", timeout=0.4).acquire(),
            ):
                start = time.monotonic()
                with pytest.raises(BackendUnavailable):
                    attempt()
                assert time.monotonic() - start <= 0.4 + 0.5 + 0.5
            holder.release()
            proxy.heal()
            with far.lock("dark", timeout=3) as held:
                assert held.owned()
        finally:
            far.close()
