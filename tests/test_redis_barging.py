"""Bounded barging on redis://: the process that frees a lock may take it straight back past a
young queue (fair=False), a bounded number of times; fair=True waiters are always served in
order; a lock freed that way and taken by nobody reaches the queue's head within milliseconds.

Driven at the backend (``try_acquire``, ``release``, waiters), so every step is a real script
call on a real server and the order of events is the test's, not the scheduler's.
"""

from __future__ import annotations

import os
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest
import redis

from lockkit_core import LockKit
from lockkit_core.backends.base import Grant, Waiter, owner_id
from lockkit_core.backends.redis import RedisBackend
from lockkit_core.backends.redis.waiter import RedisWaiter

pytestmark = pytest.mark.redis


def _bound(name: str) -> int:
    """One of lua/lock.lua's barging bounds, read from the script the backend runs."""
    source = resources.files("lockkit_core.backends.redis").joinpath("lua", "lock.lua")
    found = re.search(rf"^local {name} = (\d+)", source.read_text(), re.MULTILINE)
    assert found is not None, f"{name} is not in lua/lock.lua"
    return int(found.group(1))


#: how long a head may be passed over, and how many times
BARGE_MS = _bound("BARGE_MS")
BARGE_MAX = _bound("BARGE_MAX")
#: how long after a release that freed the lock past it the head asks for it
PAUSE_MS = _bound("PAUSE_MS")
TTL = 10.0


@pytest.fixture
def kit(redis_server: Any) -> Iterator[LockKit]:
    """A kit whose release listener is subscribed already: its first subscription wakes
    every waiter (whatever was missed meanwhile), which would hide a waiter never told."""
    with LockKit(redis_server.url, namespace=f"b{uuid.uuid4().hex[:8]}", ttl=TTL) as kit:
        _listening(kit)
        yield kit


def _listening(kit: LockKit) -> None:
    """Start ``kit``'s release listener and wait until it is subscribed (its start would
    otherwise take part of a test's few milliseconds, and its first wake-up confuse it)."""
    backend = _backend(kit)
    warm = backend.waiter(f"{kit.namespace}:warm", secrets.token_hex(16), False)
    assert backend._listener.wait_ready(5.0)
    time.sleep(0.05)  # the wake-up that follows the subscription has passed
    _close(warm, False)


@pytest.fixture
def raw(redis_server: Any) -> redis.Redis:
    return redis.Redis.from_url(redis_server.url)


def _backend(kit: LockKit) -> RedisBackend:
    assert isinstance(kit.backend, RedisBackend)
    return kit.backend


def _holder_id(raw: redis.Redis, kit: LockKit) -> str | None:
    value = raw.get(f"lockkit:{{{kit.namespace}:k}}")
    return None if value is None else value.decode().split("|", 1)[0]


class _Queued:
    """A blocking caller (owner, waiter) that asked once, found the key busy and queued."""

    def __init__(self, kit: LockKit, fair: bool) -> None:
        self.backend = _backend(kit)
        self.key = f"{kit.namespace}:k"
        self.owner = secrets.token_hex(16)
        self.waiter: Waiter = self.backend.waiter(self.key, self.owner, fair)
        self.grant = self.backend.try_acquire(self.key, self.owner, TTL)
        assert self.grant.acquired is False

    def wait(self, timeout: float = 2.0) -> tuple[Grant | None, float]:
        start = time.monotonic()
        handed = self.waiter.wait(timeout)
        return handed, time.monotonic() - start

    def takes(self, handed: Grant | None) -> None:
        """After a wait: handed the lock, or (told to ask) asks and gets it; then frees it."""
        acquired = (
            handed is not None or self.backend.try_acquire(self.key, self.owner, TTL).acquired
        )
        _close(self.waiter, acquired)
        assert acquired, "the waiter did not get the free lock"
        assert self.backend.release(self.key, self.owner)

    def served(self) -> bool:
        """Told it holds the lock, or (its time to ask again came first) asks and finds so."""
        handed, took = self.wait()
        assert took < 1.0, f"a waiter handed the lock slept {took:.2f} s"
        if handed is not None:
            return handed.acquired
        return self.backend.try_acquire(self.key, self.owner, TTL).acquired


def _close(waiter: Waiter, acquired: bool) -> None:
    """Close ``waiter``; one that gave up has left the queue when this returns. It leaves
    from a background thread, and these tests order every step themselves."""
    waiter.close(acquired)
    assert isinstance(waiter, RedisWaiter)
    queue = f"lockkit:{{{waiter.key}}}:q"
    client = _backend_of(waiter).client
    deadline = time.monotonic() + 5.0
    while client.zscore(queue, waiter.id) is not None:
        assert time.monotonic() < deadline, "a waiter that gave up never left the queue"
        time.sleep(0.002)


def _backend_of(waiter: RedisWaiter) -> RedisBackend:
    return waiter._backend


def _held(kit: LockKit) -> tuple[RedisBackend, str, str]:
    """The backend, the key, and the owner that holds the key now."""
    backend, key = _backend(kit), f"{kit.namespace}:k"
    holder = secrets.token_hex(16)
    assert backend.try_acquire(key, holder, TTL).acquired
    return backend, key, holder


def _ask(kit: LockKit, fair: bool) -> tuple[str, bool]:
    """A new blocking caller's first attempt (as a releaser asking again makes it), its
    waiter then closed: the owner, and whether it got the lock."""
    backend = _backend(kit)
    owner = secrets.token_hex(16)
    waiter = backend.waiter(f"{kit.namespace}:k", owner, fair)
    got = backend.try_acquire(f"{kit.namespace}:k", owner, TTL).acquired
    _close(waiter, got)
    return owner, got


def test_a_fair_false_releaser_takes_the_lock_again_past_a_young_queue(
    kit: LockKit, raw: redis.Redis
) -> None:
    backend, key, holder = _held(kit)
    queued = _Queued(kit, fair=False)
    barged = 0
    for _ in range(5):  # a slow machine may age the head past BARGE_MS between two calls
        assert backend.release(key, holder)
        holder, got = _ask(kit, fair=False)
        if got:
            barged += 1
        else:  # the head was served in order: start again with a young head
            assert queued.served()
            queued.waiter.close(True)
            assert backend.release(key, queued.owner)
            assert backend.try_acquire(key, holder, TTL).acquired
            queued = _Queued(kit, fair=False)
            continue
        # The head was not handed the lock: it asks again when its answer said, and still
        # has its place.
        told, took = queued.wait()
        assert told is None and took < 1.0
        assert raw.zrange(f"lockkit:{{{kit.namespace}:k}}:q", 0, -1) == [
            queued.waiter.id.encode()  # type: ignore[attr-defined]
        ]
    _close(queued.waiter, False)
    assert backend.release(key, holder)
    assert barged >= 1, "a fair=False releaser never took the lock past a young queue"


def test_a_fair_false_waiter_is_passed_over_at_most_barge_max_times(
    kit: LockKit, raw: redis.Redis
) -> None:
    backend, key, holder = _held(kit)
    queued = _Queued(kit, fair=False)
    passed = 0
    for _ in range(5 * BARGE_MAX):
        assert backend.release(key, holder)
        holder, got = _ask(kit, fair=False)
        if not got:
            break
        passed += 1
    else:
        pytest.fail(f"the queued waiter was passed over {passed} times and never served")
    assert passed <= BARGE_MAX
    assert _holder_id(raw, kit) == owner_id(queued.owner)
    assert queued.served()
    queued.waiter.close(True)
    assert backend.release(key, queued.owner)


def test_a_fair_false_waiter_that_waited_past_the_bound_is_handed_the_lock(
    kit: LockKit, raw: redis.Redis
) -> None:
    backend, key, holder = _held(kit)
    queued = _Queued(kit, fair=False)
    time.sleep(2 * BARGE_MS / 1000)
    assert backend.release(key, holder)
    assert _holder_id(raw, kit) == owner_id(queued.owner)  # handed on release, in order
    _, got = _ask(kit, fair=False)
    assert got is False
    assert queued.served()
    queued.waiter.close(True)
    assert backend.release(key, queued.owner)


@pytest.mark.parametrize("fair_head", [True, False])
def test_a_fair_waiter_in_the_queue_keeps_every_release_in_order(
    kit: LockKit, raw: redis.Redis, fair_head: bool
) -> None:
    """fair=True waiters are served strictly in arrival order, whether they are the head or
    behind a fair=False head: no caller takes the lock past them."""
    backend, key, holder = _held(kit)
    first = _Queued(kit, fair=fair_head)
    second = _Queued(kit, fair=True)
    for queued in (first, second):
        assert backend.release(key, holder)
        assert _holder_id(raw, kit) == owner_id(queued.owner)
        _, got = _ask(kit, fair=False)
        assert got is False
        assert queued.served()
        queued.waiter.close(True)
        holder = queued.owner
    assert backend.release(key, holder)


def test_a_head_that_may_be_passed_over_asks_again_by_itself_in_time(kit: LockKit) -> None:
    """A release while the head may be passed over need not tell it, so its answer says when
    to ask again: a lock freed and taken by nobody waits for it a few milliseconds, not the
    holder's lease."""
    backend, key, holder = _held(kit)
    queued = _Queued(kit, fair=False)
    retry_after = queued.grant.retry_after
    assert retry_after is not None and retry_after <= BARGE_MS / 1000
    assert backend.release(key, holder)
    handed, took = queued.wait(TTL)  # as the acquire loop does, whatever the caller allows
    assert took < 0.5, f"the head slept {took:.2f} s on a free lock"
    queued.takes(handed)


def test_a_fair_waiter_is_told_the_holders_lease_not_a_turn(kit: LockKit) -> None:
    backend, key, holder = _held(kit)
    queued = _Queued(kit, fair=True)
    assert queued.grant.retry_after is not None and queued.grant.retry_after > TTL / 2
    _close(queued.waiter, False)
    assert backend.release(key, holder)


def test_a_head_told_the_lock_is_free_that_leaves_tells_the_next(kit: LockKit) -> None:
    backend, key, holder = _held(kit)
    first = _Queued(kit, fair=False)
    second = _Queued(kit, fair=False)
    assert backend.release(key, holder)  # the head is young: told "free", or handed it
    _close(first.waiter, False)  # gives up (its timeout): leaves the queue
    handed, took = second.wait()
    assert took < 1.0, f"the next waiter slept {took:.2f} s on a free lock"
    second.takes(handed)


def test_a_head_that_left_without_a_word_is_left_for_at_its_turn(kit: LockKit) -> None:
    """A head that gave up without a round trip (the store had just failed) may head a queue
    that releases do not tell: its process leaves for it when it would have asked again."""
    backend, key, holder = _held(kit)
    gone = _Queued(kit, fair=False)
    second = _Queued(kit, fair=False)
    gone.waiter.close(False, reachable=False)
    assert backend.release(key, holder)
    handed, took = second.wait(TTL)
    assert took < 1.0, f"the next waiter slept {took:.2f} s on a free lock"
    second.takes(handed)


def _elsewhere(redis_server: Any, namespace: str) -> LockKit:
    """A kit that speaks for another process (another host's, as the store sees it)."""
    other = LockKit(redis_server.url, namespace=namespace, ttl=TTL)
    _backend(other)._holder_here = f"elsewhere.example pid {os.getpid()}"
    _listening(other)
    return other


def test_only_the_process_that_freed_the_lock_takes_it_past_a_young_queue(
    kit: LockKit, raw: redis.Redis, redis_server: Any
) -> None:
    """Another process that asks while the lock is free past a young head queues instead:
    otherwise two processes would take turns past the queue, switching on every section."""
    backend, key = _backend(kit), f"{kit.namespace}:k"
    other = _elsewhere(redis_server, kit.namespace)
    try:
        holder = secrets.token_hex(16)
        assert backend.try_acquire(key, holder, TTL).acquired
        started = time.monotonic()  # the head's time as the head starts after this
        queued = _Queued(kit, fair=False)
        assert backend.release(key, holder)
        stranger = secrets.token_hex(16)
        waiter = _backend(other).waiter(key, stranger, False)
        got = _backend(other).try_acquire(key, stranger, TTL)
        assert got.acquired is False, "a process that did not free the lock took it past the queue"
        after_stranger = _holder_id(raw, kit)  # still free, for the releaser to take back
        back, taken = _ask(kit, fair=False)
        if time.monotonic() - started >= BARGE_MS / 1000 and not taken:
            # the head's time ran out meanwhile, and releases hand over in order again
            pytest.skip("the head aged past BARGE_MS during the test (a very slow machine)")
        assert after_stranger is None
        assert got.retry_after is not None and got.retry_after <= 1.0
        assert taken, "the process that freed the lock could not take it back"
        _close(waiter, False)
        _close(queued.waiter, False)
        assert backend.release(key, back)
    finally:
        other.close()


def test_a_head_told_of_a_lock_freed_past_it_takes_it_within_milliseconds(
    kit: LockKit, raw: redis.Redis
) -> None:
    """A head that became the head after it last asked does not know when to ask: the
    release that frees the lock past it tells it; nobody takes the lock back, so the head
    takes it PAUSE_MS later, not when the holder's lease would have ended."""
    backend, key, holder = _held(kit)
    first = _Queued(kit, fair=False)
    second = _Queued(kit, fair=False)
    assert second.grant.retry_after is not None and second.grant.retry_after > BARGE_MS / 1000
    _close(first.waiter, False)  # leaves: second is the head now, and has not asked since
    assert backend.release(key, holder)
    start = time.monotonic()
    handed, _ = second.wait(TTL)  # as the acquire loop waits: the holder's lease, or less
    second.takes(handed)
    took = time.monotonic() - start
    assert took < 0.5, f"the head took {took:.2f} s to take a lock freed past it"
