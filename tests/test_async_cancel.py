"""Cancelled asyncio waiters leave nothing behind, on real stores: ``asyncio.wait_for``
storms against a held lock, a release in the middle of a storm, and a waiter cancelled just
as the lock is handed to it. Afterwards the store itself shows no queue entry and no stray
holder, and the next acquisition is immediate. A blocking acquire run in a thread pool fails
these checks (its threads keep waiting and later take the lock): the last test shows it."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
import uuid
from collections.abc import Iterator

import pytest
from async_support import leftovers

from lockkit_core import LockKit
from lockkit_core.backends.base import Capability

STORM = 150


def _patient(url: str) -> str:
    """``url`` with 10 s socket and connect timeouts (and a ZooKeeper session that outlasts
    them) instead of 2 s: a storm puts its STORM clients on the store at once, and a loaded
    machine's store answered some of them after more than 2 s (BackendUnavailable), which
    says nothing about what a cancelled waiter leaves behind."""
    url = re.sub(r"\b(socket_timeout|socket_connect_timeout)=2\b", r"\1=10", url)
    return re.sub(r"\bsession_timeout=4\b", "session_timeout=20", url)


@pytest.fixture
def kit(store_url: str) -> Iterator[LockKit]:
    url = _patient(store_url)
    with LockKit(url, namespace=f"c-{uuid.uuid4().hex[:8]}", ttl=10.0) as kit:
        yield kit


async def next_is_immediate(kit: LockKit, key: str) -> float:
    """The quickest of three non-blocking takes of ``key``, each of which must succeed: one
    round trip, which a loaded machine may stretch once, but not every time."""
    took = []
    for _ in range(3):
        started = time.monotonic()
        lock = kit.lock(key)
        assert await lock.aacquire(blocking=False), "the key should be free at once"
        took.append(time.monotonic() - started)
        await lock.arelease()
    return min(took)


@pytest.mark.parametrize("fair", [False, True])
def test_a_wait_for_storm_against_a_held_lock_leaves_nothing(kit: LockKit, fair: bool) -> None:
    if fair and Capability.FAIR not in kit.backend.capabilities:
        pytest.skip(f"{kit.backend.url.scheme}:// does not queue waiters in order")

    async def main() -> None:
        holder = kit.lock("storm")
        assert await holder.aacquire()

        async def contender(i: int) -> bool:
            lock = kit.lock("storm", fair=fair)
            try:
                await asyncio.wait_for(lock.aacquire(), timeout=0.002 + (i % 25) * 0.002)
            except TimeoutError:
                return False
            await lock.arelease()
            return True

        got = await asyncio.gather(*(contender(i) for i in range(STORM)))
        assert not any(got)
        assert leftovers(kit, "storm") == ["a holder"]
        await holder.arelease()
        assert leftovers(kit, "storm") == []
        assert await next_is_immediate(kit, "storm") < 0.05

    asyncio.run(main())


def test_a_release_in_the_middle_of_a_storm_leaves_nothing(kit: LockKit) -> None:
    rng = random.Random(17)

    async def main() -> int:
        holder = kit.lock("mid")
        assert await holder.aacquire()
        wins = 0
        fair = Capability.FAIR in kit.backend.capabilities

        async def contender(patient: bool) -> None:
            nonlocal wins
            lock = kit.lock("mid", fair=fair)
            # One patient contender: on a loaded machine a store's round trip can outlast
            # every short timeout, and the release must still reach somebody.
            timeout = 10.0 if patient else rng.uniform(0.001, 0.3)
            try:
                await asyncio.wait_for(lock.aacquire(), timeout=timeout)
            except TimeoutError:
                return
            wins += 1
            await asyncio.sleep(0.001)
            await lock.arelease()

        async def release_soon() -> None:
            await asyncio.sleep(0.02)
            await holder.arelease()

        await asyncio.gather(release_soon(), *(contender(n == 0) for n in range(STORM)))
        assert leftovers(kit, "mid") == []
        assert await next_is_immediate(kit, "mid") < 0.05
        return wins

    assert asyncio.run(main()) >= 1  # the release reached the storm


def test_a_waiter_cancelled_as_the_lock_reaches_it_passes_it_on(kit: LockKit) -> None:
    async def main() -> None:
        holder = kit.lock("handed")
        assert await holder.aacquire()
        fair = Capability.FAIR in kit.backend.capabilities
        first = asyncio.create_task(kit.lock("handed", fair=fair).aacquire())
        await asyncio.sleep(0.05)  # queued first
        second_lock = kit.lock("handed", fair=fair)
        second = asyncio.create_task(second_lock.aacquire(timeout=5))
        await asyncio.sleep(0.05)
        # The release hands over to (or wakes) the first waiter, which is cancelled while the
        # release is on its way: ZooKeeper tells a watcher of the delete before the deleter
        # hears back, so the waiter could otherwise be done by the time the release returns.
        releasing = asyncio.create_task(holder.arelease())
        await asyncio.sleep(0)
        first.cancel()
        await releasing
        with pytest.raises(asyncio.CancelledError):
            await first
        started = time.monotonic()
        assert await second
        assert time.monotonic() - started < 0.5
        await second_lock.arelease()
        assert leftovers(kit, "handed") == []

    asyncio.run(main())


def test_a_blocking_acquire_in_a_thread_pool_fails_these_checks(kit: LockKit) -> None:
    async def main() -> list[str]:
        holder = kit.lock("pool")
        assert await holder.aacquire()

        async def contender() -> None:
            lock = kit.lock("pool")
            # The anti-pattern: the thread outlives its cancelled caller.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.to_thread(lock.acquire, timeout=1.0), 0.01)

        await asyncio.gather(*(contender() for _ in range(4)))
        await holder.arelease()
        await asyncio.sleep(0.2)
        return leftovers(kit, "pool")

    assert asyncio.run(main()) != [], "a cancelled thread-pool waiter took the lock later"
    kit.admin.force_release("pool")
