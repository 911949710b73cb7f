"""Real faults of the link to a real redis-server, through a loopback proxy that partitions,
resets and slows it: a holder cut off, waiters reset or slow, an attempt abandoned in an
outage. (Faults of holders and of the server are in tests/test_redis_faults.py.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from holders import check_no_ghost_holds_the_key
from lost_calls import LostCalls

from lockkit_core import BackendUnavailable, LockKit, LockLost, LockTimeout
from lockkit_core.backends.base import owner_hint
from lockkit_core.testing import RedisServer, TcpProxy

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def _far(proxy: TcpProxy, namespace: str, timeout: float, **kit: Any) -> LockKit:
    """A kit whose connections all go through ``proxy``, with socket and connect timeouts
    of ``timeout`` seconds."""
    url = proxy.url_for("redis", 0, socket_timeout=timeout, socket_connect_timeout=timeout)
    return LockKit(url, namespace=namespace, **kit)


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[TcpProxy]:
    with TcpProxy("127.0.0.1", redis_server.port) as p:
        yield p


@pytest.mark.fault("holder-cut-off", "lost-and-told")
def test_partitioned_holder_knows_it_lost_before_anyone_else_takes_over(
    proxy: TcpProxy, direct: LockKit, namespace: str
) -> None:
    far = _far(proxy, namespace, 0.3)
    lost = LostCalls()
    stop = threading.Event()
    try:
        held = far.lock("p", ttl=1.0, auto_renew=True, on_lost=lost)
        assert held.acquire()
        lost_at: list[float] = []
        slowest_check = 0.0

        def watch() -> None:
            nonlocal slowest_check
            while not stop.is_set():
                start = time.monotonic()
                try:
                    held.check()
                except LockLost:
                    lost_at.append(time.monotonic())
                    return
                finally:
                    slowest_check = max(slowest_check, time.monotonic() - start)
                time.sleep(0.01)

        # check() is per handle, not per thread: a watcher thread may call it
        watcher = threading.Thread(target=watch)
        proxy.partition()
        partitioned = time.monotonic()
        watcher.start()
        taker = direct.lock("p", timeout=3)
        assert taker.acquire() is True
        # Whoever takes over, the cut-off holder already knows, decided locally. A check()
        # that asked the server would wait out the far kit's 0.3 s socket timeout in the
        # partition; a local one takes microseconds, stretched only by a loaded machine's
        # scheduling (the watcher's worst of a hundred calls has seen 50 ms and more), so
        # anything under two thirds of the socket timeout was decided locally.
        start = time.monotonic()
        with pytest.raises(LockLost):
            held.check()
        assert time.monotonic() - start < 0.2
        watcher.join(3)
        stop.set()
        assert lost_at, "check() never raised LockLost during the partition"
        assert lost_at[0] - partitioned <= 1.0 + 0.1
        assert slowest_check < 0.2, f"check() blocked for {slowest_check:.3f} s"
        assert lost.event.wait(1.0)
        assert held.token is not None and taker.token is not None
        assert taker.token > held.token
        proxy.heal()
        with pytest.raises(LockLost):
            held.release()
        info = direct.admin.info("p")
        assert info is not None and info.token == taker.token
        taker.release()
    finally:
        stop.set()
        far.close()


@pytest.mark.fault("reset-while-waiting", "refused")
@pytest.mark.parametrize("storm", [False, True], ids=["one-reset", "reset-storm"])
def test_connection_reset_while_waiting_never_hangs_or_lies(
    proxy: TcpProxy, direct: LockKit, namespace: str, storm: bool
) -> None:
    far = _far(proxy, namespace, 1, ttl=1.0)
    holder = direct.lock("w", ttl=5)
    assert holder.acquire()
    outcome: dict[str, Any] = {}

    def wait_for_it() -> None:
        lock = far.lock("w", timeout=3)
        try:
            outcome["got"] = lock.acquire()
        except BackendUnavailable as exc:
            outcome["error"] = exc
            return
        if outcome["got"]:
            outcome["owner"], outcome["token"] = lock.owner, lock.token
            outcome["info"] = direct.admin.info("w")
            lock.release()

    waiter = threading.Thread(target=wait_for_it)
    started = time.monotonic()
    waiter.start()
    try:
        deadline = time.monotonic() + 2
        while proxy.connections() < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # the pooled connection and the release listener
        time.sleep(0.1)
        assert "got" not in outcome, "the waiter got a lock that was held"
        proxy.reset()
        if storm:
            end = time.monotonic() + 0.6
            while time.monotonic() < end:
                time.sleep(0.05)
                proxy.reset()
        time.sleep(0.1)
        holder.release()
        waiter.join(3 + 1 + 2)
        assert not waiter.is_alive(), "the waiter hung after the reset"
    finally:
        waiter.join(10)
        far.close()
    assert time.monotonic() - started < 3 + 1 + 1.5
    if "error" in outcome:
        assert "got" not in outcome
    else:
        assert outcome["got"] is True, "acquire() returned False although the key was released"
        info = outcome["info"]
        assert info is not None, "acquire() reported a lock the server does not hold"
        assert info.owner_hint == owner_hint(outcome["owner"])
        assert info.token == outcome["token"]
        assert proxy.accepted > 2, "the reset did not cut the waiter's connections"
    # Whatever happened, nothing is left held beyond the waiter's 1 s ttl.
    with direct.lock("w", timeout=1.5) as after:
        assert after.owned()


@pytest.mark.fault("slow-link", "refused")
def test_link_slower_than_the_ttl_never_reports_a_grant(
    proxy: TcpProxy, direct: LockKit, namespace: str
) -> None:
    far = _far(proxy, namespace, 3)
    try:
        with far.lock("warm-up"):
            pass  # connect and load the scripts while the link is fast
        proxy.set_delay(0.3)  # 0.6 s round trip against a 0.2 s lease
        attempts: list[Callable[[], bool]] = [
            lambda: far.lock("slow", ttl=0.2).acquire(blocking=False),
            lambda: far.lock("slow", ttl=0.2, timeout=0.5).acquire(),
        ]
        for attempt in attempts:
            start = time.monotonic()
            try:
                got = attempt()
            except BackendUnavailable as exc:
                assert "slower than the TTL" in str(exc)
            else:
                assert got is False, "a grant that outlived its lease was reported as acquired"
            returned = time.monotonic()
            assert returned - start < 4.0
            # Nothing is left held beyond the lease: the late grant was given back or expired.
            free_by = returned + 0.2 + 0.1
            while direct.admin.info("slow") is not None:
                assert time.monotonic() < free_by, "the key stayed held past its ttl"
                time.sleep(0.01)
        # The same slow link is fine for a lease that outlasts the round trip.
        with far.lock("slow", ttl=3.0, auto_renew=False, timeout=5) as held:
            assert held.owned()
            info = direct.admin.info("slow")
            assert info is not None and info.token == held.token
        proxy.set_delay(0)
        with pytest.raises(LockTimeout), direct.lock("slow"), far.lock("slow", timeout=0.1):
            pass
    finally:
        far.close()


@pytest.mark.fault("slow-link", "refused")
def test_timeout_is_honoured_on_a_slow_link(
    proxy: TcpProxy, direct: LockKit, namespace: str
) -> None:
    """A waiter's first wait (which starts the release listener) keeps the caller's timeout:
    at most the timeout plus the round trips of the attempts in flight."""
    far = _far(proxy, namespace, 3)
    try:
        with far.lock("warm-up"):
            pass  # the command connection exists; the release listener does not yet
        proxy.set_delay(0.1)  # 0.2 s round trip, well inside every lease here
        with direct.lock("busy"):
            for _ in range(2):
                start = time.monotonic()
                assert far.lock("busy", timeout=0.3).acquire() is False
                elapsed = time.monotonic() - start
                assert elapsed < 0.3 + 2 * 0.2, f"timeout=0.3 returned after {elapsed:.3f} s"
    finally:
        far.close()


def test_a_timed_out_waiter_returns_at_its_timeout_and_leaves_the_queue_after(
    proxy: TcpProxy, direct: LockKit, redis_server: RedisServer, namespace: str
) -> None:
    """Leaving the queue is not the caller's wait: a waiter whose time is up returns then,
    not a round trip later, and its entry is taken out of the queue just after."""
    far = _far(proxy, namespace, 3)
    raw = redis.Redis.from_url(redis_server.url)
    queue = f"lockkit:{{{namespace}:busy}}:q"
    try:
        with direct.lock("busy"):
            # the release listener is up, subscribed over a fast link
            assert far.lock("busy", timeout=0.05, fair=True).acquire() is False
            proxy.set_delay(0.15)  # a 0.3 s round trip
            for _ in range(2):
                start = time.monotonic()
                # fair=True: told of the holder's lease, it makes no attempt after the first
                assert far.lock("busy", timeout=0.6, fair=True).acquire() is False
                elapsed = time.monotonic() - start
                assert elapsed < 0.6 + 0.15, f"timeout=0.6 returned after {elapsed:.3f} s"
                deadline = time.monotonic() + 3
                while raw.zcard(queue):
                    assert time.monotonic() < deadline, "the waiter never left the queue"
                    time.sleep(0.01)
            assert far.lock("busy", timeout=0.6, fair=True).acquire() is False
            far.close()  # a leave still on its way lands before the kit's connections close
            assert raw.zcard(queue) == 0
    finally:
        far.close()
        raw.close()


def test_a_lock_released_as_a_far_waiter_gives_up_reaches_the_next_waiter(
    proxy: TcpProxy, direct: LockKit, redis_server: RedisServer, namespace: str
) -> None:
    """The holder releases just as a waiter on a slow link gives up: the lock is handed to that
    waiter's entry, whose leave is still on its way. The leave passes it on when it lands, so
    the next waiter gets it within a couple of round trips, not when a lease ends."""
    far = _far(proxy, namespace, 3)
    raw = redis.Redis.from_url(redis_server.url)
    queue = f"lockkit:{{{namespace}:k}}:q"

    def queued(n: int) -> None:
        deadline = time.monotonic() + 5
        while raw.zcard(queue) != n:
            assert time.monotonic() < deadline, f"the queue never held {n} waiter(s)"
            time.sleep(0.005)

    got: dict[str, Any] = {}

    def next_waiter() -> None:
        with direct.lock("k", timeout=10, fair=True):
            got["at"] = time.monotonic()

    try:
        holder = direct.lock("k", ttl=30, auto_renew=False)  # waiting it out would show
        assert holder.acquire()
        assert far.lock("k", timeout=0.05, fair=True).acquire() is False  # listener up
        queued(0)
        proxy.set_delay(0.15)
        far_lock = far.lock("k", timeout=0.6, fair=True)
        far_waits = threading.Thread(target=lambda: got.setdefault("far", far_lock.acquire()))
        far_waits.start()
        queued(1)
        behind = threading.Thread(target=next_waiter)
        behind.start()
        queued(2)
        far_waits.join(5)
        assert got["far"] is False
        holder.release()  # far's entry is still the head: its leave has not landed yet
        released = time.monotonic()
        behind.join(10)
        assert "at" in got, "the next waiter never got the lock"
        assert got["at"] - released < 1.5, f"it got it {got['at'] - released:.2f} s later"
    finally:
        far.close()
        raw.close()


def test_proxy_reset_is_seen_as_an_outage_not_as_busy(proxy: TcpProxy, namespace: str) -> None:
    """While every connection is cut at once, acquire either works or raises."""
    far = _far(proxy, namespace, 1, ttl=2)
    try:
        results: list[object] = []
        for _ in range(5):
            proxy.reset()
            try:
                lock = far.lock("r")
                got = lock.acquire(blocking=False)
                results.append(got)
                if got:
                    lock.release()
            except BackendUnavailable as exc:
                results.append(exc)
        assert False not in results, "an outage was reported as a busy lock"
        assert True in results, "a reconnect after a reset should work"
    finally:
        far.close()


@pytest.mark.fault("abandoned-attempt", "freed")
@pytest.mark.parametrize("far_calls", [True, False], ids=["next-call", "idle"])
def test_an_attempt_abandoned_in_an_outage_does_not_hold_the_key_after_it(
    proxy: TcpProxy, direct: LockKit, namespace: str, far_calls: bool
) -> None:
    """An attempt sent into a black hole is delivered when the link heals (as TCP retransmits
    it), after its caller gave up with BackendUnavailable: if it takes the key then, nobody
    may hold it for the whole lease. Its kit gives it back by itself, without waiting for
    another call (``idle``)."""
    far = _far(proxy, namespace, 0.5, ttl=10)
    try:
        with far.lock("warm-up"):
            pass  # connected
        holder = direct.lock("late")
        assert holder.acquire()
        proxy.partition()
        with pytest.raises(BackendUnavailable):
            far.lock("late").acquire(blocking=False)  # held in the proxy, not lost
        holder.release()  # the key is free when the held attempt arrives
        proxy.heal()
        check_no_ghost_holds_the_key(far, direct, "late", far_calls=far_calls)
    finally:
        far.close()
