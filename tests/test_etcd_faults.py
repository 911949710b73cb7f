"""Real faults against a real etcd: killed, stopped and restarted holders and servers, lease
expiry under a holder, a black-holed link, and leases that failed attempts must not leave."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from dark_link import check_a_dark_link_raises_within_its_timeouts
from holders import (
    check_no_ghost_holds_the_key,
    check_sigkilled_holder_frees_the_key_within_its_ttl,
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume,
)
from lost_calls import LostCalls
from stopped_store import assert_every_attempt_refused

from lockkit_core import BackendUnavailable, LockKit, LockLost
from lockkit_core.backends.etcd import EtcdBackend
from lockkit_core.testing import TcpProxy
from lockkit_core.testing.etcd import EtcdServer, etcd_request

pytestmark = [pytest.mark.etcd, pytest.mark.slow]

FAST = "?socket_timeout=1&connect_timeout=0.5"


@pytest.fixture
def namespace() -> str:
    return f"fault{uuid.uuid4().hex[:10]}"


def _far(proxy: TcpProxy, namespace: str, timeout: float, **kit: Any) -> LockKit:
    """A kit whose connections all go through ``proxy``, with socket and connect timeouts
    of ``timeout`` seconds."""
    url = proxy.url_for("etcd", None, socket_timeout=timeout, connect_timeout=timeout)
    return LockKit(url, namespace=namespace, **kit)


@pytest.fixture(scope="module")
def own_server() -> Iterator[EtcdServer]:
    """An etcd member of this module's own, to restart, pause and count leases on."""
    with EtcdServer() as server:
        yield server


@pytest.fixture
def direct(own_server: EtcdServer, namespace: str) -> Iterator[LockKit]:
    kit = LockKit(own_server.url + FAST, namespace=namespace, ttl=5)
    yield kit
    kit.close()


def _leases(server: EtcdServer) -> set[int]:
    return set(server.leases())


def _settled_leases(server: EtcdServer, expected: set[int], within: float = 1.0) -> set[int]:
    """The leases on the server once they equal ``expected`` (or after ``within`` seconds)."""
    deadline = time.monotonic() + within
    while True:
        now = _leases(server)
        if now == expected or time.monotonic() > deadline:
            return now
        time.sleep(0.02)


# -- holder processes ------------------------------------------------------------------------


@pytest.mark.fault("holder-killed", "freed")
def test_sigkilled_holder_frees_the_key_within_its_ttl(
    own_server: EtcdServer, direct: LockKit, namespace: str
) -> None:
    check_sigkilled_holder_frees_the_key_within_its_ttl(own_server.url + FAST, direct, namespace)


@pytest.mark.fault("holder-paused", "lost-and-told")
def test_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
    own_server: EtcdServer, direct: LockKit, namespace: str
) -> None:
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
        own_server.url + FAST, direct, namespace
    )


@pytest.mark.fault("holder-cut-off", "lost-and-told")
def test_lease_expiry_while_held_gives_lock_lost(own_server: EtcdServer, namespace: str) -> None:
    """The holder is cut off from etcd (a black-holed link) until its lease has expired on
    the server too: it is told before anyone else could take over, and the record is gone."""
    with TcpProxy("127.0.0.1", own_server.port()) as proxy:
        far = _far(proxy, namespace, 0.3)
        lost = LostCalls()
        try:
            held = far.lock("exp", ttl=1.0, auto_renew=True, on_lost=lost)
            assert held.acquire()
            backend = far.backend
            assert isinstance(backend, EtcdBackend)
            lease_id = backend._held[(held.full_key, held.owner or "")].lease.id
            proxy.partition()
            cut = time.monotonic()
            assert lost.event.wait(1.0 + 0.5), "the cut-off holder was never told"
            assert time.monotonic() - cut <= 1.0 + 0.1
            with pytest.raises(LockLost):
                held.check()
            # The server lets the lease expire by itself (nobody revokes it from here).
            deadline = time.monotonic() + 10
            while lease_id in own_server.leases():
                assert time.monotonic() < deadline, "the lease never expired on the server"
                time.sleep(0.1)
            with LockKit(own_server.url + FAST, namespace=namespace) as near:
                assert near.admin.info("exp") is None
            proxy.heal()
            with pytest.raises(LockLost):
                held.release()
        finally:
            far.close()


@pytest.mark.fault("holder-cut-off", "lost-and-told")
def test_revoked_lease_under_a_holder_gives_lock_lost(
    own_server: EtcdServer, direct: LockKit
) -> None:
    lost = LostCalls()
    held = direct.lock("rv", ttl=0.6, auto_renew=True, on_lost=lost)
    assert held.acquire()
    backend = direct.backend
    assert isinstance(backend, EtcdBackend)
    lease_id = backend._held[(held.full_key, held.owner or "")].lease.id
    etcd_request(own_server.port(), "lease/revoke", {"ID": lease_id})
    assert lost.event.wait(1.0), "the watchdog's renewal did not find the lease gone"
    with pytest.raises(LockLost):
        held.check()
    with pytest.raises(LockLost):
        held.release()
    assert direct.admin.info("rv") is None


def test_failed_attempts_and_timeouts_leave_no_leases(
    own_server: EtcdServer, direct: LockKit, namespace: str
) -> None:
    before = _leases(own_server)
    holder = direct.lock("busy", ttl=5)
    assert holder.acquire()
    with_holder = _leases(own_server)
    assert len(with_holder - before) == 1
    with LockKit(own_server.url + FAST, namespace=namespace) as other:
        for _ in range(5):
            assert other.lock("busy").acquire(blocking=False) is False
            assert other.lock("busy", timeout=0.1).acquire() is False
            assert other.lock("busy", fair=True, timeout=0.1).acquire() is False
        with other.lock("free") as free:  # a grant, then its release
            assert free.owned()
    assert _settled_leases(own_server, with_holder) == with_holder
    holder.release()
    assert _settled_leases(own_server, before) == before


# -- the server restarts, stops, hangs -------------------------------------------------------


@pytest.mark.fault("server-restart", "held")
def test_server_restart_while_held_keeps_the_lock_and_the_tokens_rising(
    own_server: EtcdServer, namespace: str
) -> None:
    """etcd keeps its data across a restart: a holder whose lease outlives the outage keeps
    its lock, nobody else gets it meanwhile, and later tokens are higher."""
    kit = LockKit(own_server.url + FAST, namespace=namespace)
    other = LockKit(own_server.url + FAST, namespace=namespace)
    lost = LostCalls()
    try:
        held = kit.lock("r", ttl=6.0, auto_renew=True, on_lost=lost)
        assert held.acquire()
        token = held.token
        assert token is not None
        own_server.restart()
        held.check()
        assert other.lock("r").acquire(blocking=False) is False
        held.extend()
        held.release()
        assert not lost.calls
        with other.lock("r", timeout=2) as again:
            assert again.token is not None and again.token > token
    finally:
        kit.close()
        other.close()


@pytest.mark.fault("server-stopped", "refused")
def test_stopped_server_raises_backend_unavailable_quickly(namespace: str) -> None:
    with EtcdServer() as server:
        kit = LockKit(server.url + FAST, namespace=namespace, ttl=5)
        try:
            with kit.lock("warm"):
                pass  # the pool now holds a connection that the stop will break
            server.stop()
            assert_every_attempt_refused(kit, server.port(), 1.0 + 0.5)
            server.start()
            with kit.lock("k", timeout=2) as held:
                assert held.owned()
        finally:
            kit.close()


@pytest.mark.fault("server-hung", "refused")
def test_black_holed_link_raises_within_timeout_plus_socket_timeout(
    own_server: EtcdServer, direct: LockKit, namespace: str
) -> None:
    """A waiter whose link goes dark mid-wait, and callers on a dark link: each raises
    BackendUnavailable within its timeout plus one socket timeout; none returns False."""
    with TcpProxy("127.0.0.1", own_server.port()) as proxy:
        far = _far(proxy, namespace, 0.5, ttl=5)
        try:
            holder = direct.lock("dark")
            assert holder.acquire()
            check_a_dark_link_raises_within_its_timeouts(
                far, proxy, "dark", socket_timeout=0.5, reconnect=0.5
            )
            proxy.heal()
            holder.release()
            with far.lock("dark", timeout=2) as held:
                assert held.owned()
        finally:
            far.close()


@pytest.mark.fault("abandoned-attempt", "freed")
@pytest.mark.parametrize("far_calls", [True, False], ids=["next-call", "idle"])
def test_an_attempt_abandoned_in_an_outage_does_not_hold_the_key_after_it(
    own_server: EtcdServer, direct: LockKit, namespace: str, far_calls: bool
) -> None:
    """A waiter's attempt sent into a black hole is delivered when the link heals (as TCP
    retransmits it), after its caller gave up: if it takes the key then, nobody may hold it
    for the whole lease. The lease it was sent under is revoked once the store answers, by
    the kit's own thread if it makes no other call (``idle``)."""
    with TcpProxy("127.0.0.1", own_server.port()) as proxy:
        far = _far(proxy, namespace, 0.5, ttl=10)
        try:
            holder = direct.lock("late")
            assert holder.acquire()
            failed: list[BaseException] = []

            def wait_for_it() -> None:
                try:
                    far.lock("late", timeout=2).acquire()
                except BackendUnavailable as exc:
                    failed.append(exc)

            waiter = threading.Thread(target=wait_for_it)
            waiter.start()
            time.sleep(0.3)  # queued, watching the holder; its next attempt goes dark
            proxy.partition()
            waiter.join(5)
            assert failed, "the waiter did not raise BackendUnavailable on a dark link"
            holder.release()  # the key is free when the held attempt arrives
            proxy.heal()
            check_no_ghost_holds_the_key(far, direct, "late", far_calls=far_calls)
        finally:
            far.close()
