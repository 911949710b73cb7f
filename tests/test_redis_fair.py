"""redis:// hand-overs at their cost: fair=True waiters of other processes served in exact
arrival order by their grant lists, with no notice sent; a queued fair waiter that was killed
skipped at once; and a hand-over to a waiter of the releasing process carried by the release's
own reply (one round trip per hand-over), on real servers and processes."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from holders import START_WITHIN, Holder
from polling import await_until, wait_until

from benchmarks.redis_monitor import CommandCounter
from lockkit_core import LockKit
from lockkit_core.backends.base import owner_id
from lockkit_core.testing import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def namespace() -> str:
    return f"fair{uuid.uuid4().hex[:10]}"


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def kits(redis_server: RedisServer, namespace: str) -> Iterator[tuple[LockKit, LockKit]]:
    """Two kits on one server: two listeners, as two processes have."""
    first = LockKit(redis_server.url, namespace=namespace, ttl=10)
    second = LockKit(redis_server.url, namespace=namespace, ttl=10)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def _queued(raw: redis.Redis, namespace: str, key: str) -> int:
    return int(raw.zcard(f"lockkit:{{{namespace}:{key}}}:q"))


def _go(waiter: Holder) -> None:
    """Let a ``fair`` holder process, started and waiting, ask for its lock."""
    assert waiter.proc.stdin is not None
    waiter.proc.stdin.write("go\n")
    waiter.proc.stdin.flush()


def _operation(line: str) -> str:
    """The lock operation an EVALSHA line of MONITOR ran (lua/lock.lua's ARGV[1])."""
    quoted = line.split('"')[1::2]
    return next(part for part in quoted if part in ("acquire", "release", "leave", "force"))


def _listening(kit: LockKit, key: str) -> None:
    """Start ``kit``'s listener (``key`` is held elsewhere) and wait until it is subscribed.
    A waiter queued before then polls, and the subscription wakes every waiter to ask again
    (a hand-over may have been missed meanwhile): a test that counts commands counts none
    of that."""
    early = _Thread(kit.lock(key, fair=True, timeout=0.05))
    early.join(5)
    assert early.result is False, early.result
    assert kit.backend._listener.wait_ready(5.0)  # type: ignore[attr-defined]


class _Thread(threading.Thread):
    """``lock.acquire()`` on a thread; releases at once what it got."""

    def __init__(self, lock: Any) -> None:
        super().__init__(daemon=True)
        self.lock = lock
        self.result: bool | BaseException | None = None
        self.at: float | None = None
        self.token: int | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.lock.acquire()
        except BaseException as exc:  # reported to the test
            self.result = exc
        self.at = time.monotonic()
        if self.result is True:
            self.token = self.lock.token
            self.lock.release()


def test_fair_processes_are_served_in_exact_arrival_order(
    redis_server: RedisServer, raw: redis.Redis, namespace: str
) -> None:
    with LockKit(redis_server.url, namespace=namespace, ttl=30) as kit:
        holder = kit.lock("k")
        assert holder.acquire()
        waiters = [
            Holder(redis_server.url, namespace, "k", 10.0, False, place="fair") for _ in range(8)
        ]
        try:
            for i, waiter in enumerate(waiters):
                _go(waiter)
                wait_until(lambda n=i + 1: _queued(raw, namespace, "k") == n, timeout=START_WITHIN)
            holder.release()
            tokens = []
            for i, waiter in enumerate(waiters):
                # each in turn: another process served first would hold the key meanwhile
                token, _ = waiter.acquired()
                tokens.append(token)
                assert waiter.answer("release") == "released", f"waiter {i}: {waiter.seen}"
            assert tokens == sorted(tokens) and len(set(tokens)) == 8
            # every grant pushed to a waiter's list was read: none is left for a later wait
            assert raw.keys(f"lockkit:{{{namespace}:k}}:g:*") == []
        finally:
            for waiter in waiters:
                waiter.close()


def test_a_fair_waiter_that_finds_the_key_free_leaves_no_grant_behind(
    raw: redis.Redis, namespace: str, kits: tuple[LockKit, LockKit]
) -> None:
    kit, other = kits
    # Once this process has waited (its listener is up), a blocking fair=True caller queues
    # before its first attempt and sends the read of its grant list with it; a grant made
    # at once goes to that list too, and the read sent with the attempt takes it.
    holder = other.lock("k", auto_renew=False)
    assert holder.acquire()
    first = _Thread(kit.lock("k", fair=True, timeout=5, auto_renew=False))
    wait_until(lambda: _queued(raw, namespace, "k") == 1)
    holder.release()
    first.join(5)
    assert first.result is True
    assert kit.backend._listener.healthy  # type: ignore[attr-defined]
    tokens = []
    for _ in range(20):
        lock = kit.lock("k", fair=True, timeout=5, auto_renew=False)
        assert lock.acquire()
        tokens.append(lock.token)
        lock.release()
    assert tokens == sorted(tokens) and len(set(tokens)) == 20
    assert raw.keys(f"lockkit:{{{namespace}:k}}*") == [f"lockkit:{{{namespace}:k}}:f".encode()]


def test_a_fair_hand_over_to_another_process_sends_no_notice_and_no_confirm(
    redis_server: RedisServer,
    raw: redis.Redis,
    namespace: str,
    kits: tuple[LockKit, LockKit],
) -> None:
    holding, waiting = kits
    holder = holding.lock("k", auto_renew=False)
    assert holder.acquire()
    _listening(waiting, "k")
    waiter = _Thread(waiting.lock("k", fair=True, timeout=10, auto_renew=False))
    wait_until(lambda: _queued(raw, namespace, "k") == 1)
    time.sleep(0.05)  # its read of the grant list is on its way
    with CommandCounter(redis_server.port) as seen:
        holder.release()
        waiter.join(10)
    assert waiter.result is True, waiter.result
    mine = [line for line in seen.lines if namespace in line]
    # the release, and the waiter's own release: no confirming attempt in between
    assert [_operation(line) for line in mine if line.startswith("evalsha")] == [
        "release",
        "release",
    ], mine
    # the grant list carries the grant; nobody is woken on pub/sub for it
    inner = [line for line in seen.scripted if line.startswith(("publish", "spublish"))]
    assert inner == [], inner


class _Holding(threading.Thread):
    """``lock.acquire()`` on a thread, holding what it got until ``done`` is set."""

    def __init__(self, lock: Any) -> None:
        super().__init__(daemon=True)
        self.lock = lock
        self.got = threading.Event()
        self.done = threading.Event()
        self.start()

    def run(self) -> None:
        if self.lock.acquire():
            self.got.set()
            self.done.wait(10)
            self.lock.release()


def test_a_fair_hand_over_and_a_fair_join_run_few_commands_in_the_server(
    redis_server: RedisServer,
    raw: redis.Redis,
    namespace: str,
    kits: tuple[LockKit, LockKit],
) -> None:
    # The release that hands a busy queue's head its grant, and the attempt that queues a
    # fair waiter, are the two scripts of every fair=True section (benchmarks.redis_fair):
    # what they run inside redis-server is its CPU per section.
    holding, waiting = kits
    holder = holding.lock("k", auto_renew=False)
    assert holder.acquire()
    _listening(waiting, "k")
    first = _Holding(waiting.lock("k", fair=True, timeout=10, auto_renew=False))
    wait_until(lambda: _queued(raw, namespace, "k") == 1)
    second = _Holding(waiting.lock("k", fair=True, timeout=10, auto_renew=False))
    wait_until(lambda: _queued(raw, namespace, "k") == 2)
    third: _Holding | None = None
    try:
        time.sleep(0.05)  # their reads of their grant lists are on their way
        with CommandCounter(redis_server.port) as seen:
            holder.release()
            assert first.got.wait(10)
        assert [line.split()[0] for line in seen.lines if namespace in line] == ["evalsha"]
        # was 20: ZRANGE + ZREM for the head, the head's barging fields, a DEL of the lease
        # it overwrites, a second EXISTS of the queue
        assert len(seen.scripted) <= 14, seen.scripted
        assert not second.got.is_set() and _queued(raw, namespace, "k") == 1
        with CommandCounter(redis_server.port) as seen:
            third = _Holding(waiting.lock("k", fair=True, timeout=10, auto_renew=False))
            wait_until(lambda: _queued(raw, namespace, "k") == 2)
        # was 11: a ZSCORE before the ZADD, and a PTTL and PEXPIRE each for Q and E
        assert len(seen.scripted) <= 9, seen.scripted
    finally:
        first.done.set()
        second.got.wait(10)
        second.done.set()
        if third is not None:
            third.got.wait(10)
            third.done.set()
            third.join(10)
        first.join(10)
        second.join(10)


def test_a_killed_fair_waiter_does_not_hold_up_the_next_one(
    redis_server: RedisServer, raw: redis.Redis, namespace: str
) -> None:
    with LockKit(redis_server.url, namespace=namespace, ttl=10) as kit:
        holder = kit.lock("k", auto_renew=False)
        assert holder.acquire()
        dead = Holder(redis_server.url, namespace, "k", 10.0, True, place="fair")
        try:
            _go(dead)
            wait_until(lambda: _queued(raw, namespace, "k") == 1, timeout=START_WITHIN)
            dead.signal(signal.SIGKILL)
            dead.proc.wait(5)
            live = _Thread(kit.lock("k", fair=True, timeout=8))
            wait_until(lambda: _queued(raw, namespace, "k") == 2)
            holder.release()
            released = time.monotonic()
            live.join(10)
            assert live.result is True, f"the live waiter got {live.result!r}"
            assert live.at is not None and live.at - released < 1.0
        finally:
            dead.close()


@pytest.mark.parametrize("place", ["fair", ""])
def test_a_killed_waiter_is_skipped_while_a_pattern_subscriber_listens(
    redis_server: RedisServer, raw: redis.Redis, namespace: str, place: str
) -> None:
    # A monitoring client on PSUBSCRIBE lockkit:* receives every notice: PUBLISH counts it,
    # so a count of receivers says nothing about the waiter's own process.
    spy = raw.pubsub()
    spy.psubscribe("lockkit:*")
    with LockKit(redis_server.url, namespace=namespace, ttl=10) as kit:
        holder = kit.lock("k", auto_renew=False)
        assert holder.acquire()
        dead = Holder(redis_server.url, namespace, "k", 10.0, True, place=place)
        try:
            if place:
                _go(dead)
            wait_until(lambda: _queued(raw, namespace, "k") == 1, timeout=START_WITHIN)
            time.sleep(0.05)  # past a fair=False head's first 10 ms: it is handed the lock
            dead.signal(signal.SIGKILL)
            dead.proc.wait(5)
            live = _Thread(kit.lock("k", fair=bool(place), timeout=8))
            wait_until(lambda: _queued(raw, namespace, "k") == 2)
            holder.release()
            released = time.monotonic()
            live.join(10)
            assert live.result is True, f"the live waiter got {live.result!r}"
            assert live.at is not None and live.at - released < 1.0, (
                f"handed over {live.at - released:.3f} s after the release"
            )
        finally:
            dead.close()
            spy.close()


def test_hand_overs_between_tasks_of_one_process_cost_one_round_trip_each(
    redis_server: RedisServer, raw: redis.Redis, namespace: str, kits: tuple[LockKit, LockKit]
) -> None:
    # fair=True: a fair=False head is not handed the lock while it is young (bounded
    # barging, test_redis_barging); it asks for it
    kit, _ = kits
    count = 20
    held: list[int] = []
    inside = 0

    async def main() -> None:
        holder = kit.lock("k")
        assert await holder.aacquire()
        _listening(kit, "k")

        async def task() -> None:
            nonlocal inside
            lock = kit.lock("k", fair=True, timeout=10)
            async with lock:
                inside += 1
                assert inside == 1, "two tasks held the lock at once"
                assert lock.token is not None
                held.append(lock.token)
                await asyncio.sleep(0)
                inside -= 1

        tasks = [asyncio.create_task(task()) for _ in range(count)]
        await await_until(lambda: _queued(raw, namespace, "k") == count)
        with CommandCounter(redis_server.port) as seen:
            await holder.arelease()
            await asyncio.gather(*tasks)
        commands = [_operation(line) for line in seen.lines if namespace in line]
        # the holder's release and each task's: every grant came in a release's reply
        assert commands == ["release"] * (count + 1), commands

    asyncio.run(main())
    assert len(held) == count
    assert held == sorted(held) and len(set(held)) == count


def test_a_waiter_of_the_releasing_process_that_left_without_a_word_passes_it_on(
    raw: redis.Redis, namespace: str, kits: tuple[LockKit, LockKit]
) -> None:
    kit, _ = kits
    holder = kit.lock("k", auto_renew=False)
    assert holder.acquire()
    # A waiter of the same kit queues, then gives up as after an outage: no round trip.
    backend = kit.backend
    full_key, owner = f"{namespace}:k", "f" * 32
    gone = backend.waiter(full_key, owner, True)
    assert backend.try_acquire(full_key, owner, 10.0).acquired is False
    gone.close(False, reachable=False)
    live = _Thread(kit.lock("k", fair=True, timeout=8))
    queue, gone_id = f"lockkit:{{{namespace}:k}}:q", owner_id(owner)
    wait_until(lambda: _queued(raw, namespace, "k") - (raw.zscore(queue, gone_id) is not None) == 1)
    # The release may name the waiter that left (its process has no such waiter any more):
    # its leave passes the lock on, either way the live waiter gets it at once.
    holder.release()
    released = time.monotonic()
    live.join(10)
    assert live.result is True, f"the live waiter got {live.result!r}"
    assert live.at is not None and live.at - released < 1.0
