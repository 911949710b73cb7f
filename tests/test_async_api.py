"""The asyncio API on one ``Lock`` handle: ``async with``, ``aacquire``, ``arelease``,
``aextend`` and ``@kit.locked`` on ``async def``, with the blocking API's semantics (leases,
renewal, fencing, ``on_lost``, adoption), on every store that has it."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from async_support import leftovers

from lockkit_core import LockKit
from lockkit_core.errors import (
    BackendUnavailable,
    LockLost,
    LockNotOwned,
    LockTimeout,
    NotSupported,
)
from lockkit_core.testing import TcpProxy


@pytest.fixture
def kit(store_url: str) -> Iterator[LockKit]:
    with LockKit(
        store_url, namespace=f"t-{uuid.uuid4().hex[:8]}", ttl=5.0, auto_renew=False
    ) as kit:
        yield kit


def test_async_with_holds_and_releases(kit: LockKit) -> None:
    async def main() -> None:
        async with kit.lock("order:42", timeout=1) as held:
            assert held.owned() and held.token is not None
            assert kit.admin.info("order:42") is not None
        assert kit.admin.info("order:42") is None
        assert leftovers(kit, "order:42") == []

    asyncio.run(main())


def test_aacquire_is_false_on_timeout_and_async_with_raises(kit: LockKit) -> None:
    async def main() -> None:
        holder = kit.lock("k")
        assert await holder.aacquire()

        async def other() -> None:
            contender = kit.lock("k")
            started = time.monotonic()
            assert await contender.aacquire(timeout=0.2) is False
            assert 0.19 <= time.monotonic() - started < 0.5
            assert await contender.aacquire(blocking=False) is False
            with pytest.raises(LockTimeout):
                async with kit.lock("k", timeout=0.05):
                    pass

        await asyncio.create_task(other())  # another task: no reentry
        await holder.arelease()
        assert leftovers(kit, "k") == []

    asyncio.run(main())


def test_a_waiter_gets_the_lock_on_release_with_a_higher_token(kit: LockKit) -> None:
    async def one_round() -> float:
        holder = kit.lock("k")
        assert await holder.aacquire()
        first = holder.token
        assert first is not None

        async def wait_for_it() -> tuple[float, int | None]:
            waiter = kit.lock("k")
            assert await waiter.aacquire(timeout=5)
            got_at = time.monotonic()
            token = waiter.token
            await waiter.arelease()
            return got_at, token

        waiting = asyncio.create_task(wait_for_it())
        await asyncio.sleep(0.1)
        released_at = time.monotonic()
        await holder.arelease()
        got_at, token = await waiting
        assert token is not None and token > first
        return got_at - released_at

    # A higher token in every round; soon after the release in one of three: a loaded machine
    # can delay one hand-over by a scheduling slice or two, a waiter that polls for its turn
    # instead of being woken by the release misses in every round.
    rounds = []
    for _ in range(3):
        waited = asyncio.run(one_round())
        rounds.append(waited)
        if waited < 0.1:
            return
    pytest.fail(f"the waiter got the lock {rounds} s after the release: not woken by it")


def test_blocking_and_async_holders_exclude_each_other(kit: LockKit) -> None:
    def one_round() -> float:
        held = threading.Event()
        go = threading.Event()

        def thread_holder() -> None:
            with kit.lock("k"):
                held.set()
                go.wait(5)

        thread = threading.Thread(target=thread_holder)
        thread.start()
        assert held.wait(5)

        async def main() -> float:
            lock = kit.lock("k")
            assert await lock.aacquire(timeout=0.1) is False
            asyncio.get_running_loop().call_later(0.1, go.set)
            started = time.monotonic()
            assert await lock.aacquire(timeout=5)
            waited = time.monotonic() - started
            await lock.arelease()
            return waited

        waited = asyncio.run(main())
        thread.join()
        return waited

    # Never before the holder let go, in any round; soon after it in one of three (a loaded
    # machine can delay one hand-over; a waiter that is not told never makes it).
    rounds = []
    for _ in range(3):
        waited = one_round()
        assert waited > 0.09
        rounds.append(waited)
        if waited < 0.3:
            return
    pytest.fail(f"the asyncio waiter took {rounds} s after the thread let go")


def test_reentrancy_is_per_task(kit: LockKit) -> None:
    async def main() -> None:
        async with kit.lock("k") as outer:
            async with kit.lock("k"):  # the same task re-enters
                assert outer.owned()
            assert outer.owned()

            async def other_task() -> bool:
                return await kit.lock("k").aacquire(timeout=0.05)

            assert await asyncio.create_task(other_task()) is False
        assert kit.admin.info("k") is None

    asyncio.run(main())


def test_arelease_of_a_lock_not_held_raises(kit: LockKit) -> None:
    async def main() -> None:
        with pytest.raises(LockNotOwned):
            await kit.lock("k").arelease()
        lock = kit.lock("k")
        assert await lock.aacquire()
        await lock.arelease()
        with pytest.raises(LockNotOwned):
            await lock.arelease()

    asyncio.run(main())


def test_an_async_acquisition_belongs_to_its_handle(kit: LockKit) -> None:
    # asyncio.wait_for (before 3.12) and create_task acquire in a task of their own: the
    # caller's task releases it.
    async def main() -> None:
        lock = kit.lock("k")
        assert await asyncio.wait_for(lock.aacquire(), 1.0)
        assert await asyncio.create_task(kit.lock("k").aacquire(timeout=0.05)) is False
        await lock.arelease()
        assert kit.admin.info("k") is None

    asyncio.run(main())


def test_aextend_resets_the_lease(kit: LockKit) -> None:
    async def main() -> None:
        lock = kit.lock("k", ttl=1.0)
        assert await lock.aacquire()
        await asyncio.sleep(0.3)
        await lock.aextend(3.0)
        await asyncio.sleep(0.9)  # past the first lease
        lock.check()
        lease = kit.admin.info("k")
        assert lease is not None and lease.ttl_remaining is not None
        assert lease.ttl_remaining > 1.0
        await lock.arelease()

    asyncio.run(main())


def test_auto_renew_keeps_an_async_hold(store_url: str) -> None:
    with LockKit(store_url, ttl=0.6, auto_renew=True) as kit:

        async def main() -> None:
            async with kit.lock("k") as held:
                await asyncio.sleep(1.5)  # 2.5 leases
                held.check()
                contender = asyncio.create_task(kit.lock("k").aacquire(blocking=False))
                assert await contender is False

            assert kit.admin.info("k") is None

        asyncio.run(main())


def test_detach_lets_go_of_an_asyncio_acquisition(kit: LockKit) -> None:
    # detach() hands a hold to a batched store call (Backend.end_run); after it, the handle
    # must not hold the lock any more, however it was acquired: a release through it would
    # free the key under the batch's feet.
    lock = kit.lock("k")

    async def take() -> None:
        assert await lock.aacquire()

    asyncio.run(take())
    hold, was_lost = lock.detach()
    assert not was_lost
    assert not lock.owned()
    with pytest.raises(LockNotOwned):
        lock.release()
    assert kit.admin.info("k") is not None, "the detached lease is the batch's to free"
    assert kit.backend.release(lock.full_key, hold.owner) is True


def test_a_lost_lease_runs_on_lost_and_raises_on_leaving(kit: LockKit) -> None:
    lost: list[str] = []

    async def main() -> None:
        with pytest.raises(LockLost):
            async with kit.lock("k", ttl=0.2, on_lost=lambda lock: lost.append(lock.key)):
                await asyncio.sleep(0.4)
        assert lost == ["k"]
        assert leftovers(kit, "k") == []

    asyncio.run(main())


def test_adoption_with_aacquire(kit: LockKit) -> None:
    async def main() -> None:
        first = kit.lock("k", reentrant=False)
        assert await first.aacquire()
        owner = first.owner
        assert owner is not None
        adopted = kit.lock("k", owner=owner)
        assert await adopted.aacquire()
        assert adopted.token == first.token
        await adopted.arelease()
        assert kit.admin.info("k") is None
        with pytest.raises(LockNotOwned):
            await kit.lock("k", owner=owner).aacquire()

    asyncio.run(main())


def test_locked_decorates_async_def(kit: LockKit) -> None:
    running: list[int] = []
    overlapped = False

    @kit.locked("job:{n}", timeout=0)
    async def job(n: int) -> int:
        nonlocal overlapped
        overlapped = overlapped or n in running
        running.append(n)
        await asyncio.sleep(0.5)  # outlasts the third call's attempt on a loaded store
        running.remove(n)
        return n

    async def main() -> list[object]:
        return await asyncio.gather(job(1), job(2), job(1), return_exceptions=True)

    results = asyncio.run(main())
    assert results[1] == 2
    # The two calls of job(1) race: on a networked store either attempt may land first.
    ones = [results[0], results[2]]
    assert 1 in ones
    assert sum(isinstance(r, LockTimeout) for r in ones) == 1, ones
    assert not overlapped


def test_stores_without_asyncio_say_so() -> None:
    from lockkit_core.backends.base import Backend

    class Plain(Backend):
        def try_acquire(self, key: str, owner: str, ttl: float):  # type: ignore[no-untyped-def]
            raise AssertionError

        release = extend = list = info = force_release = try_acquire  # type: ignore[assignment]

    from lockkit_core.url import parse_url

    with pytest.raises(NotSupported, match="no asyncio API"):
        Plain(parse_url("memory://plain"), {}).aio()


@pytest.mark.redis
def test_a_redis_that_never_answers_raises_within_timeout_plus_socket_timeout() -> None:
    # A listening socket nobody reads: connecting succeeds, no answer ever comes.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    port = silent.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0?socket_timeout=0.3&socket_connect_timeout=0.3"
    try:
        with LockKit(url, ttl=5.0) as kit:

            async def main() -> float:
                started = time.monotonic()
                with pytest.raises(BackendUnavailable):
                    await kit.lock("k").aacquire(timeout=0.2)
                return time.monotonic() - started

            took = asyncio.run(main())
    finally:
        silent.close()
    assert took < 0.2 + 0.3 + 0.15, f"took {took:.3f} s"


@pytest.mark.parametrize(
    "scheme",
    [
        pytest.param("zookeeper", marks=pytest.mark.zookeeper),
        pytest.param("etcd", marks=pytest.mark.etcd),
        pytest.param("postgresql", marks=pytest.mark.postgresql),
    ],
)
def test_a_store_behind_a_partition_raises_within_timeout_plus_socket_timeout(
    scheme: str, request: pytest.FixtureRequest
) -> None:
    # The connection is up (a first lock went through), then no byte passes either way.
    fixture = "postgres_server" if scheme == "postgresql" else f"{scheme}_server"
    server = request.getfixturevalue(fixture)
    port = server.port() if scheme == "etcd" else server.port
    with TcpProxy("127.0.0.1", port) as proxy:
        url = proxy.url_for(scheme, db=None, socket_timeout=0.3)
        if scheme == "zookeeper":
            url = url.replace("?", "/?") + "&session_timeout=10"
        if scheme == "postgresql":
            url = server.url.replace(f":{port}/", f":{proxy.port}/") + "?socket_timeout=0.3"
        with LockKit(url, ttl=5.0, namespace=f"p-{uuid.uuid4().hex[:8]}") as kit:

            async def main() -> float:
                async with kit.lock("k"):
                    pass
                proxy.partition()
                started = time.monotonic()
                with pytest.raises(BackendUnavailable):
                    await kit.lock("k").aacquire(timeout=0.2)
                return time.monotonic() - started

            took = asyncio.run(main())
            proxy.heal()
    assert took < 0.2 + 0.3 + 0.5, f"took {took:.3f} s"
