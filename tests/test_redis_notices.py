"""A hand-over notice is a wake-up, never proof: a client that can read the store and PUBLISH
(both the waiter's id and its channel are in the queue's records) gets no lock granted and
raises no fencing floor by forging one. The real hand-over still arrives at once."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from polling import wait_until

from lockkit_core import LockKit
from lockkit_core.backends.base import owner_id
from lockkit_core.testing import RedisServer

pytestmark = pytest.mark.redis

#: the largest token a Lua number can still count up from; a floor there ends every lock
HUGE = 2**53 - 1


@pytest.fixture
def namespace() -> str:
    return f"n{uuid.uuid4().hex[:10]}"


@pytest.fixture
def raw(redis_server: RedisServer) -> redis.Redis:
    """The attacker: a plain client that may read the store and publish."""
    return redis.Redis.from_url(redis_server.url)


@pytest.fixture
def kits(redis_server: RedisServer, namespace: str) -> Iterator[tuple[LockKit, LockKit]]:
    """The holder's kit and the waiter's kit (each with its own listener)."""
    holder = LockKit(redis_server.url, namespace=namespace, ttl=10, auto_renew=False)
    waiting = LockKit(redis_server.url, namespace=namespace, ttl=10, auto_renew=False)
    try:
        yield holder, waiting
    finally:
        holder.close()
        waiting.close()


class _Acquire(threading.Thread):
    """``lock.acquire(timeout=...)`` on a thread: what it returned, when, and the token."""

    def __init__(self, kit: LockKit, key: str, timeout: float, fair: bool) -> None:
        super().__init__(daemon=True)
        self.lock = kit.lock(key, timeout=timeout, fair=fair)
        self.timeout = timeout
        self.result: bool | BaseException | None = None
        self.token: int | None = None
        self.took: float | None = None
        self.returned_at: float | None = None
        self.start()

    def run(self) -> None:
        start = time.monotonic()
        try:
            self.result = self.lock.acquire(timeout=self.timeout)
            self.token = self.lock.token
        except BaseException as exc:  # reported to the test, not lost on this thread
            self.result = exc
        self.returned_at = time.monotonic()
        self.took = self.returned_at - start
        if self.result is True:
            try:
                self.lock.release()
            except Exception as exc:  # LockLost: a forged grant was never the store's
                self.released: BaseException | None = exc


def _forge(raw: redis.Redis, namespace: str, key: str, payload: str) -> int:
    """Read the queue's head and its channel from the store, as any reader can, and publish
    ``<id>|<payload>`` there; returns how many listeners received it."""
    stored = f"lockkit:{{{namespace}:{key}}}"
    head = raw.zrange(stored + ":q", 0, 0)[0].decode()
    entry = raw.hget(stored + ":e", head)
    assert entry is not None
    channel = entry.decode().split("|")[2]
    assert channel, f"the queue entry {entry!r} names no channel"
    return int(raw.publish(channel, f"{head}|{payload}"))


def _queued(raw: redis.Redis, namespace: str, key: str) -> bool:
    stored = f"lockkit:{{{namespace}:{key}}}"
    return int(raw.zcard(stored + ":q")) == 1 and int(raw.hlen(stored + ":e")) > 1


def _holder_id(raw: redis.Redis, namespace: str, key: str) -> str | None:
    value = raw.get(f"lockkit:{{{namespace}:{key}}}")
    return value.decode().split("|", 1)[0] if value is not None else None


def _fence(raw: redis.Redis, namespace: str, key: str) -> int:
    value = raw.get(f"lockkit:{{{namespace}:{key}}}:f")
    assert value is not None
    return int(value)


@pytest.mark.parametrize("fair", [True, False])
def test_a_forged_hand_over_notice_does_not_grant_a_held_lock(
    kits: tuple[LockKit, LockKit], raw: redis.Redis, namespace: str, fair: bool
) -> None:
    holder_kit, waiting_kit = kits
    holder = holder_kit.lock("k")
    assert holder.acquire(timeout=1)
    assert holder.owner is not None and holder.token is not None
    waiter = _Acquire(waiting_kit, "k", timeout=1.0, fair=fair)
    wait_until(lambda: _queued(raw, namespace, "k"))
    assert _forge(raw, namespace, "k", str(holder.token + 1)) == 1
    waiter.join(5)
    assert waiter.result is False, f"a forged notice made acquire() return {waiter.result!r}"
    assert waiter.took is not None and waiter.took >= 0.95, f"returned after {waiter.took:.3f} s"
    # the holder still holds, under its own token
    assert _holder_id(raw, namespace, "k") == owner_id(holder.owner)
    holder.check()
    assert holder.token == _fence(raw, namespace, "k")
    holder.release()


def test_a_forged_huge_token_raises_no_floor(
    kits: tuple[LockKit, LockKit], raw: redis.Redis, namespace: str
) -> None:
    holder_kit, waiting_kit = kits
    holder = holder_kit.lock("k")
    assert holder.acquire(timeout=1)
    waiter = _Acquire(waiting_kit, "k", timeout=5.0, fair=True)
    wait_until(lambda: _queued(raw, namespace, "k"))
    assert _forge(raw, namespace, "k", str(HUGE)) == 1
    time.sleep(0.2)
    # a normal lock of the waiter's kit, on another key, takes the store's next token
    with waiting_kit.lock("other", timeout=1) as held:
        assert held.token == _fence(raw, namespace, "other") < HUGE
    assert waiter.result is None, f"a forged notice made acquire() return {waiter.result!r}"
    # the real hand-over: the waiter's token is the one the store gave
    holder.release()
    waiter.join(5)
    assert waiter.result is True
    assert waiter.token == _fence(raw, namespace, "k") < HUGE
    # and every later lock of the waiter's kit works, with the store's tokens
    for key in ("k", "later"):
        with waiting_kit.lock(key, timeout=1) as held:
            assert held.token == _fence(raw, namespace, key) < HUGE


def _soon_in_one_of_three(one_round: Callable[[], float]) -> None:
    """Run ``one_round`` (it returns how long a hand-over took to reach its waiter) until one
    takes under 0.1 s, three times at most: a loaded machine can delay one thread's wake-up
    by a scheduling slice or two, a waiter that is not woken by the notice misses every time."""
    rounds = []
    for _ in range(3):
        took = one_round()
        rounds.append(f"{took * 1e3:.1f}")
        if took < 0.1:
            return
    pytest.fail(f"the hand-over reached the waiter after {', '.join(rounds)} ms")


@pytest.mark.parametrize("fair", [True, False])
def test_the_real_hand_over_arrives_within_milliseconds(
    kits: tuple[LockKit, LockKit], raw: redis.Redis, namespace: str, fair: bool
) -> None:
    holder_kit, waiting_kit = kits

    def one_round() -> float:
        holder = holder_kit.lock("k", ttl=30)  # a long lease: only the notice wakes the waiter
        assert holder.acquire(timeout=1)
        first = holder.token
        assert first is not None
        waiter = _Acquire(waiting_kit, "k", timeout=10.0, fair=fair)
        wait_until(lambda: _queued(raw, namespace, "k"))
        time.sleep(0.05)  # the head is no longer young: the release hands the lock over
        released = time.monotonic()
        holder.release()
        waiter.join(5)
        assert waiter.result is True
        assert waiter.returned_at is not None
        assert waiter.token is not None and waiter.token > first
        assert waiter.token == _fence(raw, namespace, "k")
        return waiter.returned_at - released

    _soon_in_one_of_three(one_round)


def test_malformed_notices_neither_stop_the_listener_nor_wake_anyone_for_long(
    kits: tuple[LockKit, LockKit], raw: redis.Redis, namespace: str
) -> None:
    holder_kit, waiting_kit = kits

    def one_round() -> float:
        holder = holder_kit.lock("k", ttl=30)
        assert holder.acquire(timeout=1)
        waiter = _Acquire(waiting_kit, "k", timeout=10.0, fair=True)
        wait_until(lambda: _queued(raw, namespace, "k"))
        # digits that are not ASCII, more digits than int() reads, and a pause of a day
        for payload in ("\u00b2", "@\u00b2", "9" * 5000, "@" + "9" * 5000, "@", "", "@86400000"):
            assert _forge(raw, namespace, "k", payload) == 1
        time.sleep(0.2)
        listener = waiting_kit.backend._listener  # type: ignore[attr-defined]
        assert listener.healthy, "a malformed notice stopped the release listener"
        assert waiter.result is None
        released = time.monotonic()
        holder.release()
        waiter.join(5)
        assert waiter.result is True and waiter.returned_at is not None
        return waiter.returned_at - released

    _soon_in_one_of_three(one_round)


def test_an_ask_again_notice_never_puts_a_waiter_off(
    kits: tuple[LockKit, LockKit], raw: redis.Redis, namespace: str
) -> None:
    # '<id>|@<ms>' tells a queue's head, past which a lock was freed, to ask again in ms. A
    # forged one may make it ask sooner (one more round trip), never later.
    backend: Any = kits[1].backend
    waiter = backend.waiter(f"{namespace}:k", "f" * 32, False)
    try:
        assert backend._listener.wait_ready(2.0)
        time.sleep(0.05)  # subscribing wakes every waiter; the notice below must be what does
        waiter.event.clear()
        soon = time.monotonic() + 0.005
        waiter.ask_at = soon
        assert raw.publish(backend._listener.channel, f"{waiter.id}|@86400000") == 1
        wait_until(waiter.event.is_set)
        assert waiter.ask_at == soon
        waiter.event.clear()
        waiter.ask_at = None
        sent = time.monotonic()
        assert raw.publish(backend._listener.channel, f"{waiter.id}|@86400000") == 1
        wait_until(waiter.event.is_set)
        assert waiter.ask_at is not None and waiter.ask_at <= time.monotonic() + 0.01
        assert waiter.ask_at >= sent
    finally:
        waiter.close(False)
