"""Nobody alive waits a lease for nothing: short-ttl waiters, dead waiters, a half-open release
listener, and an outage while queued (all against real servers, processes and a real proxy)."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from holders import START_WITHIN, Holder
from polling import wait_until

from lockkit_core import BackendUnavailable, LockKit
from lockkit_core.backends.base import owner_id
from lockkit_core.testing import RedisServer, TcpProxy

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def namespace() -> str:
    return f"live{uuid.uuid4().hex[:10]}"


@pytest.fixture
def raw(redis_server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(redis_server.url)


@pytest.fixture
def kits(redis_server: RedisServer, namespace: str) -> Iterator[tuple[LockKit, LockKit]]:
    """The holder's kit and the waiters' kit: two clients, each with its release listener."""
    kit = LockKit(redis_server.url, namespace=namespace)
    other = LockKit(redis_server.url, namespace=namespace)
    try:
        yield kit, other
    finally:
        kit.close()
        other.close()


def _queued(raw: redis.Redis, namespace: str, key: str) -> int:
    return int(raw.zcard(f"lockkit:{{{namespace}:{key}}}:q"))


class _Waiter(threading.Thread):
    """``kit.lock(key, ...).acquire()`` on a thread; records when it returned and what, and
    releases what it got at once (locks are owned per thread)."""

    def __init__(self, kit: LockKit, key: str, **options: Any) -> None:
        super().__init__(daemon=True)
        self.lock = kit.lock(key, **options)
        self.result: bool | BaseException | None = None
        self.at: float | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.lock.acquire()
        except BaseException as exc:  # reported to the test, not lost on this thread
            self.result = exc
        self.at = time.monotonic()
        if self.result is True:
            self.lock.release()


def test_a_waiter_with_a_short_ttl_is_handed_a_long_lease(
    kits: tuple[LockKit, LockKit], raw: redis.Redis, namespace: str
) -> None:
    kit, other = kits
    holder = kit.lock("k", ttl=6, auto_renew=False)
    assert holder.acquire()
    waiter = _Waiter(other, "k", ttl=0.5, timeout=15)
    wait_until(lambda: _queued(raw, namespace, "k") == 1)
    time.sleep(1.0)
    holder.extend(6)  # the waiter's ttl is long past, the holder's lease longer still
    time.sleep(2.0)
    holder.release()
    released = time.monotonic()
    waiter.join(15)
    assert waiter.result is True
    assert waiter.at is not None
    # Handed over on the release, not after the holder's lease (6 s): a hand-over takes
    # milliseconds, the rest is the waiter's thread being scheduled on a loaded machine.
    assert waiter.at - released < 1.0, f"handed over {waiter.at - released:.3f} s late"


def test_a_killed_waiter_does_not_hold_up_the_next_one(
    redis_server: RedisServer, kits: tuple[LockKit, LockKit], raw: redis.Redis, namespace: str
) -> None:
    kit, other = kits
    holder = kit.lock("k", ttl=10, auto_renew=False)
    assert holder.acquire()
    dead = Holder(redis_server.url, namespace, "k", ttl=10.0, auto_renew=True)
    try:
        wait_until(lambda: _queued(raw, namespace, "k") == 1, timeout=START_WITHIN)
        dead.signal(signal.SIGKILL)
        dead.proc.wait(5)
        waiter = _Waiter(other, "k", ttl=10, timeout=8)
        wait_until(lambda: _queued(raw, namespace, "k") == 2)
        holder.release()
        released = time.monotonic()
        waiter.join(10)
        assert waiter.result is True, f"the live waiter got {waiter.result!r}"
        assert waiter.at is not None and waiter.at - released < 1.0
    finally:
        dead.close()


@pytest.fixture
def listener_proxy(redis_server: RedisServer) -> Iterator[TcpProxy]:
    with TcpProxy("127.0.0.1", redis_server.port) as proxy:
        yield proxy


def _listen_through(kit: LockKit, proxy: TcpProxy) -> None:
    """Route only the release listener of ``kit`` through ``proxy``; commands stay direct."""
    kit.backend.listener_client = redis.Redis.from_url(  # type: ignore[attr-defined]
        proxy.url_for("redis", 0), protocol=2, socket_timeout=5, socket_connect_timeout=5
    )


def test_a_half_open_listener_costs_a_short_delay_not_a_lease(
    listener_proxy: TcpProxy, kits: tuple[LockKit, LockKit], raw: redis.Redis, namespace: str
) -> None:
    kit, waiting = kits
    _listen_through(waiting, listener_proxy)
    try:
        holder = kit.lock("k", ttl=30, auto_renew=False)
        assert holder.acquire()
        waiter = _Waiter(waiting, "k", ttl=5, timeout=10)
        wait_until(lambda: _queued(raw, namespace, "k") == 1)
        assert listener_proxy.connections() == 1
        listener_proxy.partition()  # no RST, no FIN: the listener hears nothing more
        time.sleep(0.3)
        holder.release()
        released = time.monotonic()
        waiter.join(10)
        assert waiter.result is True, f"the waiter got {waiter.result!r}"
        assert waiter.at is not None and waiter.at - released < 2.5
        # Later waits work as well, whether or not the listener is back yet.
        with kit.lock("k", auto_renew=False):
            later = _Waiter(waiting, "k", ttl=5, timeout=10)
            wait_until(lambda: _queued(raw, namespace, "k") == 1)
            released = time.monotonic()
        later.join(10)
        assert later.result is True and later.at is not None and later.at - released < 2.5
    finally:
        listener_proxy.heal()


def test_a_notice_for_a_waiter_that_left_without_a_word_is_passed_on(
    kits: tuple[LockKit, LockKit], raw: redis.Redis, namespace: str
) -> None:
    kit, other = kits
    holder = kit.lock("k", ttl=10, auto_renew=False)
    assert holder.acquire()
    # A waiter of `other` queues, then gives up as it does after an outage: no round trip.
    backend = other.backend
    full_key, owner = f"{namespace}:k", "e" * 32
    # fair=True: a fair=False head is left for at its time to ask (test_redis_barging)
    gone = backend.waiter(full_key, owner, True)
    assert backend.try_acquire(full_key, owner, 10.0).acquired is False
    gone.close(False, reachable=False)
    # Its queue is left in the background; a release before that lands hands the lock to
    # it, and its process passes it on. Either way the live waiter gets it at once.
    waiter = _Waiter(other, "k", ttl=10, timeout=8)
    queue = f"lockkit:{{{namespace}:k}}:q"
    gone_id = owner_id(owner)
    wait_until(lambda: _queued(raw, namespace, "k") - (raw.zscore(queue, gone_id) is not None) == 1)
    holder.release()
    released = time.monotonic()
    waiter.join(10)
    assert waiter.result is True, f"the live waiter got {waiter.result!r}"
    assert waiter.at is not None and waiter.at - released < 1.0


def test_an_outage_while_queued_costs_one_socket_timeout_not_two(namespace: str) -> None:
    with RedisServer() as server:
        socket_timeout = 1.0
        url = server.url + f"?socket_timeout={socket_timeout:g}&socket_connect_timeout=1"
        kit = LockKit(url, namespace=namespace)
        other = LockKit(url, namespace=namespace)
        timeout = 2.0
        try:
            # The holder's lease ends just before the waiter's timeout, when the waiter tries
            # again: into a server that no longer answers.
            assert kit.lock("k", ttl=timeout - 0.1, auto_renew=False).acquire()
            threading.Timer(1.2, server.pause).start()
            start = time.monotonic()
            with pytest.raises(BackendUnavailable):
                other.lock("k", ttl=5, timeout=timeout).acquire()
            elapsed = time.monotonic() - start
            assert elapsed < timeout + socket_timeout + 0.4, f"returned after {elapsed:.3f} s"
        finally:
            server.resume()
            kit.close()
            other.close()
