"""The event loop is never blocked: tasks awaiting a busy lock stall a 10 ms ticker on the
same loop by under 10 ms, on every store with an asyncio API."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import pytest
from async_support import worst_stall

from lockkit_core import LockKit

WAITERS = 50
#: the longest stall a loop that never blocks may show (see worst_stall)
STALL_LIMIT = 0.010


@pytest.fixture
def kit(store_url: str) -> Iterator[LockKit]:
    with LockKit(store_url, namespace=f"l-{uuid.uuid4().hex[:8]}", ttl=10.0) as kit:
        yield kit


def _busy_lock_stall(kit: LockKit) -> float:
    """The worst ticker stall while WAITERS tasks await a lock another thread holds."""
    held = threading.Event()
    done = threading.Event()

    def holder() -> None:  # another thread holds it: the loop has nothing else to do
        with kit.lock("busy"):
            held.set()
            done.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(5)

    async def wait_all() -> list[bool]:
        async def waiter() -> bool:
            lock = kit.lock("busy")
            if not await lock.aacquire(timeout=0.6):
                return False
            await lock.arelease()
            return True

        # Half of them time out, half are handed the lock after the release at 0.3 s.
        asyncio.get_running_loop().call_later(0.3, done.set)
        return await asyncio.gather(*(waiter() for _ in range(WAITERS)))

    async def main() -> tuple[list[bool], float]:
        return await worst_stall(wait_all())

    results, stall = asyncio.run(main())
    thread.join()
    assert any(results)
    return stall


def test_waiting_on_a_busy_lock_never_blocks_the_loop(kit: LockKit) -> None:
    # A loop that waits by blocking stalls for the whole 0.3 s hold on every run; a loaded
    # machine can deschedule this process for a few ms now and then (or for tens of ms while
    # other processes pin the CPUs: that time is left out, see worst_stall). So one run of
    # five must stay under 10 ms: scheduler noise passes, a blocking wait never does.
    stalls = []
    for _ in range(5):
        stalls.append(_busy_lock_stall(kit))
        if stalls[-1] < STALL_LIMIT:
            return
    pytest.fail(f"the loop stalled for {', '.join(f'{s * 1000:.1f}' for s in stalls)} ms")


def test_a_blocking_acquire_on_the_loop_would_fail_this_check(kit: LockKit) -> None:
    # The check is able to fail: a blocking acquire on the loop stalls the ticker past the
    # limit. It waits 0.2 s, of which a loaded machine may keep it queued for a CPU a good
    # part, after each poll of a store that polls (one mysql run counted 0.029 s): that part
    # is not counted (see worst_stall), the rest is, and is well past the limit.
    holder = kit.lock("busy", reentrant=False)
    assert holder.acquire()

    async def main() -> float:
        async def blocking() -> bool:
            return kit.lock("busy").acquire(timeout=0.2)

        return (await worst_stall(blocking()))[1]

    try:
        assert asyncio.run(main()) > STALL_LIMIT
    finally:
        holder.release()
