"""Real faults of holders and of the server against a real redis-server: killed and stopped
holders; a server restarted, stopped, hung or demoted to a replica. (Faults of the link, through
a loopback proxy, are in tests/test_redis_link_faults.py.)"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis
from holders import (
    check_sigkilled_holder_frees_the_key_within_its_ttl,
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume,
)
from lost_calls import LostCalls
from redis_fault_fixtures import FAST

from lockkit_core import BackendUnavailable, LockKit, LockLost
from lockkit_core.testing import RedisServer, free_port

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to stop, pause or restart."""
    with RedisServer() as server:
        yield server


# -- holder processes ------------------------------------------------------------------------


@pytest.mark.fault("holder-killed", "freed")
def test_sigkilled_holder_frees_the_key_within_its_ttl(
    redis_server: RedisServer, direct: LockKit, namespace: str
) -> None:
    check_sigkilled_holder_frees_the_key_within_its_ttl(redis_server.url + FAST, direct, namespace)


@pytest.mark.fault("holder-paused", "lost-and-told")
def test_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
    redis_server: RedisServer, direct: LockKit, namespace: str
) -> None:
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
        redis_server.url + FAST, direct, namespace
    )


# -- the server restarts, stops, hangs ---------------------------------------------------------


@pytest.mark.fault("server-restart", "lost-and-told")
def test_restarted_server_means_lost_lock_then_service_resumes(
    own_server: RedisServer, namespace: str
) -> None:
    kit = LockKit(
        own_server.url + "?socket_timeout=0.5&socket_connect_timeout=0.5", namespace=namespace
    )
    lost = LostCalls()
    try:
        held = kit.lock("job", ttl=1.0, auto_renew=True, on_lost=lost)
        assert held.acquire()
        old_token = held.token
        assert old_token is not None
        own_server.restart()  # nothing persisted: the lock is gone from the server
        restarted = time.monotonic()
        assert lost.event.wait(1.0 + 1.0), "the holder was never told the lock was lost"
        assert time.monotonic() - restarted <= 2.0
        with pytest.raises(LockLost):
            held.check()
        with pytest.raises(LockLost):
            held.release()
        assert lost.calls == 1
        again = kit.lock("job", timeout=2)
        assert again.acquire() is True
        assert again.token is not None and again.token > old_token
        again.release()
        other = LockKit(own_server.url, namespace=namespace)
        with other.lock("other", timeout=2) as fresh:
            assert fresh.token is not None and fresh.token > old_token
        other.close()
    finally:
        kit.close()


@pytest.mark.fault("server-stopped", "refused")
def test_stopped_server_raises_backend_unavailable_quickly(
    own_server: RedisServer, namespace: str
) -> None:
    kit = LockKit(own_server.url + FAST, namespace=namespace, ttl=5)
    try:
        with kit.lock("warm"):
            pass  # the pool now holds a connection that the stop will break
        own_server.stop()
        attempts: list[Callable[[], bool]] = [
            lambda: kit.lock("k").acquire(blocking=False),
            lambda: kit.lock("k", timeout=0.5).acquire(),
            lambda: kit.lock("k").acquire(),  # waits forever for the lock, not for the server
        ]
        for attempt in attempts:
            start = time.monotonic()
            with pytest.raises(BackendUnavailable) as caught:
                attempt()
            assert time.monotonic() - start < 2.0
            assert str(own_server.port) in str(caught.value)
        start = time.monotonic()
        with pytest.raises(BackendUnavailable), kit.lock("k", timeout=5):
            pytest.fail("the body ran without the lock")
        assert time.monotonic() - start < 2.0
        with pytest.raises(BackendUnavailable):
            kit.admin.info("k")
        own_server.start()
        with kit.lock("k", timeout=2) as held:
            assert held.owned()
    finally:
        kit.close()


@pytest.mark.fault("server-hung", "refused")
def test_hung_server_raises_backend_unavailable_within_the_socket_timeout(
    own_server: RedisServer, namespace: str
) -> None:
    kit = LockKit(own_server.url + FAST, namespace=namespace, ttl=1)
    try:
        with kit.lock("warm"):
            pass
        own_server.pause()
        try:
            start = time.monotonic()
            with pytest.raises(BackendUnavailable):
                kit.lock("k").acquire(blocking=False)
            assert time.monotonic() - start < 1.0 + 0.6
            start = time.monotonic()
            with pytest.raises(BackendUnavailable):
                kit.lock("k", timeout=0.5).acquire()
            assert time.monotonic() - start < 0.5 + 1.0 + 0.6
        finally:
            own_server.resume()
            resumed = time.monotonic()
        # The server still runs the requests we gave up on, granting "k" to owners that never
        # heard back: such a grant only lasts its 1 s ttl.
        with kit.lock("k", timeout=2) as held:
            assert held.owned()
            assert time.monotonic() - resumed < 1.0 + 0.3
    finally:
        kit.close()


@pytest.mark.parametrize("stale", ["yes", "no"], ids=["READONLY", "MASTERDOWN"])
def test_a_demoted_server_is_unavailable_not_a_plain_error(
    own_server: RedisServer, namespace: str, stale: str
) -> None:
    # A failover demotes the server under us: callers must see "unavailable" (503, fail
    # open, "unreleased"), not a bare BackendError that a web adapter turns into a 500.
    admin = redis.Redis(port=own_server.port)
    with LockKit(own_server.url, namespace=namespace) as kit:
        admin.config_set("replica-serve-stale-data", stale)
        admin.replicaof("127.0.0.1", free_port())
        try:
            with pytest.raises(BackendUnavailable, match="replica"):
                kit.lock("k").acquire(timeout=0)
        finally:
            admin.replicaof("no", "one")
            admin.config_set("replica-serve-stale-data", "yes")
