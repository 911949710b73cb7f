"""The acquire loop over a slow or cut link to a real redis-server (through the loopback proxy):
a grant is kept when still valid, a link slower than the ttl is an error and not a spin, and an
outage costs the caller at most one socket timeout past its own timeout."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from lockkit_core import BackendUnavailable, LockKit
from lockkit_core.testing import RedisServer, TcpProxy

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def namespace() -> str:
    return f"slow{uuid.uuid4().hex[:10]}"


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[TcpProxy]:
    with TcpProxy("127.0.0.1", redis_server.port) as p:
        yield p


@pytest.fixture
def direct(redis_server: RedisServer, namespace: str) -> Iterator[LockKit]:
    kit = LockKit(redis_server.url + "?socket_timeout=2", namespace=namespace, ttl=5)
    yield kit
    kit.close()


def _far(proxy: TcpProxy, namespace: str, socket_timeout: float, ttl: float) -> LockKit:
    url = proxy.url_for(
        "redis", 0, socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout
    )
    return LockKit(url, namespace=namespace, ttl=ttl)


def _in_thread(func: object, limit: float) -> tuple[object, float]:
    """Run ``func`` in a thread; (its result or exception, seconds taken); fails past ``limit``."""
    box: list[object] = []

    def run() -> None:
        try:
            assert callable(func)
            box.append(func())
        except BaseException as exc:  # handed back to the test
            box.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    took = time.monotonic() - started
    if thread.is_alive():
        raise AssertionError(f"still running after {limit} s")
    return box[0], took


@pytest.mark.parametrize("timeout", [0.1, 0])
def test_a_grant_on_a_free_key_is_kept_when_the_round_trip_exceeds_the_timeout(
    proxy: TcpProxy, direct: LockKit, namespace: str, timeout: float
) -> None:
    far = _far(proxy, namespace, socket_timeout=5, ttl=10)
    try:
        with far.lock("warm"):
            pass
        proxy.set_delay(0.15)  # each way: a round trip of 0.3 s or more, past the timeout
        # Not reentrant: the acquisition made in the helper thread is the handle's.
        lock = far.lock("free", timeout=timeout, reentrant=False)
        result, took = _in_thread(lock.acquire, 10)
        assert result is True, f"acquire on a free key returned {result!r} after {took:.2f} s"
        assert took > timeout
        assert lock.owned()
        info = direct.admin.info("free")
        assert info is not None and info.token == lock.token
        assert not direct.lock("free").acquire(timeout=0)
        proxy.set_delay(0)
        lock.release()
        assert direct.admin.info("free") is None
    finally:
        far.close()


def test_grants_that_arrive_expired_raise_instead_of_spinning(
    proxy: TcpProxy, direct: LockKit, namespace: str
) -> None:
    ttl = 0.05
    far = _far(proxy, namespace, socket_timeout=5, ttl=ttl)
    try:
        with far.lock("warm", ttl=1):
            pass
        proxy.set_delay(0.06)  # each way: every grant is older than the ttl when it lands
        result, took = _in_thread(lambda: far.lock("doa").acquire(timeout=None), 30)
        assert isinstance(result, BackendUnavailable), f"got {result!r}"
        message = str(result)
        assert "round trip" in message and "ttl" in message, message
        assert took < 15
    finally:
        proxy.set_delay(0)
        far.close()
    direct.admin.force_release("doa")


@pytest.mark.parametrize("when", ["before", "while waiting"])
def test_an_outage_costs_at_most_one_socket_timeout_past_the_timeout(
    proxy: TcpProxy, direct: LockKit, namespace: str, when: str
) -> None:
    socket_timeout, timeout = 1.5, 1.0
    far = _far(proxy, namespace, socket_timeout=socket_timeout, ttl=5)
    holder = direct.lock("busy", auto_renew=False)
    assert holder.acquire(timeout=0)
    try:
        with far.lock("warm"):
            pass
        if when == "before":
            proxy.partition()
        else:
            threading.Timer(0.3, proxy.partition).start()
        result, took = _in_thread(lambda: far.lock("busy").acquire(timeout=timeout), 20)
        assert isinstance(result, BackendUnavailable | bool), f"got {result!r}"
        assert result is not True
        # The contract is timeout + one socket timeout; two would be 4 s.
        assert took < timeout + socket_timeout + 0.8, f"took {took:.2f} s"
    finally:
        proxy.heal()
        far.close()
        holder.release()


def test_a_slow_grant_is_renewed_before_its_lease_runs_out(
    proxy: TcpProxy, direct: LockKit, namespace: str
) -> None:
    """The lease counts from before the request was sent, and so must its renewals: a grant
    that took 2.3 s of a 3 s ttl to arrive is renewed at once, not ttl/4..ttl/3 after it came
    (past its lease). A loaded ZooKeeper server's slow acquire lost locks so."""
    far = _far(proxy, namespace, socket_timeout=5, ttl=3.0)
    try:
        with far.lock("warm"):
            pass
        lost: list[object] = []
        held = far.lock("slow", auto_renew=True, on_lost=lost.append, reentrant=False)
        proxy.partition()  # the request waits in the proxy (as on a stalled server)
        sent = time.monotonic()
        acquiring = threading.Thread(target=held.acquire, daemon=True)
        acquiring.start()
        time.sleep(2.3)
        proxy.heal()  # delivered now: the grant comes 2.3 s into its lease, the link is fast
        acquiring.join(5)
        assert held.owned()
        while time.monotonic() < sent + 3.8:  # past the first lease: only a renewal keeps it
            assert direct.lock("slow").acquire(blocking=False) is False
            held.check()
            time.sleep(0.1)
        assert not lost
        held.release()
    finally:
        far.close()
