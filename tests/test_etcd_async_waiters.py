"""Many asyncio waiters of one process on one etcd:// key: every one gets the lock in turn,
in the order they asked, with no error, and each hand-over costs about one gRPC message (the
member's own ``/metrics``). Before, 1,000 waiters each watched and polled the store and
overloaded the member (``waiting for the applied index took too long``)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from async_support import leftovers
from polling import await_until

from lockkit_core import LockKit
from lockkit_core.backends.base import Grant
from lockkit_core.backends.etcd import EtcdBackend
from lockkit_core.backends.etcd.client import Call
from lockkit_core.testing.etcd import EtcdServer, etcd_request, grpc_messages

pytestmark = pytest.mark.etcd


@pytest.fixture
def kit(etcd_server: EtcdServer) -> Iterator[LockKit]:
    url = etcd_server.url + "?socket_timeout=5"
    with LockKit(url, namespace=f"aw-{uuid.uuid4().hex[:8]}", ttl=10.0) as kit:
        yield kit


async def _queued(on: LockKit, full_key: str, count: int = 1, within: float = 10.0) -> None:
    """Return once ``count`` waiters of ``on``'s line for ``full_key`` have their places in
    etcd's queue (the attempt that queued each was answered)."""
    lines = on.backend.aio().lines  # type: ignore[attr-defined]

    def queued() -> bool:
        line = lines.get(full_key)
        places = list(line.places) if line is not None else []
        return len(places) == count and all(p.waiter.queued_at is not None for p in places)

    await await_until(queued, within)


async def _queue_and_drain(
    kit: LockKit, waiters: int, before_release: float, on_queued: Callable[[], object] = list
) -> list[int]:
    """Hold the key, start ``waiters`` tasks on it, call ``on_queued()`` and release after
    ``before_release`` s; return the order (task numbers) in which they held it. Two holders
    at once fail it, and so do tokens that do not rise."""
    holder = kit.lock("hot")
    assert await holder.aacquire()
    order: list[int] = []
    tokens: list[int] = []
    inside = 0
    started = 0

    async def waiter(i: int) -> None:
        nonlocal inside, started
        lock = kit.lock("hot", fair=True)
        started += 1
        assert await lock.aacquire(timeout=60), f"waiter {i} timed out"
        assert inside == 0, "two holders at once"
        inside += 1
        order.append(i)
        assert lock.token is not None
        tokens.append(lock.token)
        await asyncio.sleep(0)  # let anyone else who could wrongly get in run
        inside -= 1
        await lock.arelease()

    tasks = []
    for i in range(waiters):
        tasks.append(asyncio.create_task(waiter(i)))
        await asyncio.sleep(0)  # in arrival order: each asks before the next is made
    while started < waiters:
        await asyncio.sleep(0.01)
    # Time for the waiters' first attempts to be answered (the store's queue to settle),
    # however the backend queues them: the release below must find them all waiting.
    await asyncio.sleep(before_release)
    on_queued()
    await holder.arelease()
    await asyncio.wait_for(asyncio.gather(*tasks), 90)
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), "tokens must rise"
    fresh = kit.lock("hot")  # the key is free: a new record, with a higher token still
    assert await fresh.aacquire(blocking=False)
    assert fresh.token is not None and fresh.token > tokens[-1]
    await fresh.arelease()
    return order


def test_a_thousand_asyncio_waiters_on_one_key_all_get_it_in_turn(kit: LockKit) -> None:
    started = time.monotonic()
    order = asyncio.run(_queue_and_drain(kit, 1000, 0.5))
    assert sorted(order) == list(range(1000))
    assert leftovers(kit, "hot") == []
    assert time.monotonic() - started < 60


def test_a_hand_over_between_asyncio_waiters_is_one_store_request(
    kit: LockKit, etcd_server: EtcdServer
) -> None:
    waiters = 40
    port = etcd_server.port()

    before: dict[str, int] = {}
    order = asyncio.run(
        _queue_and_drain(kit, waiters, 0.5, lambda: before.update(grpc_messages(port)))
    )
    sent = sum(grpc_messages(port).values()) - sum(before.values())
    assert sent / waiters <= 1.5, f"{sent} gRPC messages for {waiters} hand-overs"
    assert order == list(range(waiters)), "served in the order they asked"


def test_a_renewal_of_the_last_holder_on_its_way_cannot_take_a_handed_lock_back(
    kit: LockKit,
) -> None:
    """The record stays under the same lease when it is handed over in place: a renewal of
    the previous holder that read its hold before the hand-over and writes after it must
    fail (it compares the record's revision), not rewrite the record for its old owner."""
    backend = kit.backend
    assert isinstance(backend, EtcdBackend)

    async def main() -> None:
        holder = kit.lock("renewed", auto_renew=False)
        assert await holder.aacquire()
        owner = holder.owner
        assert owner is not None
        waiter = kit.lock("renewed", auto_renew=False)
        waiting = asyncio.create_task(waiter.aacquire(timeout=10))
        lines = backend.aio().lines

        def queued_first() -> bool:
            line = lines.get(holder.full_key)
            return line is not None and line.places[0].waiter.first() is not None

        while not queued_first():
            await asyncio.sleep(0.01)  # queued first in etcd, waiting for our release
        # The holder's renewal, up to the write it is about to send.
        renewal = backend.adopting(holder.full_key, owner, 10.0)
        step = next(renewal)
        while not (isinstance(step, Call) and step.path == "kv/txn"):
            step = renewal.send(backend.client.perform(step))
        await holder.arelease()
        assert await waiting, "the release handed the lock over"
        with pytest.raises(StopIteration) as renewed:
            renewal.send(backend.client.perform(step))
        assert renewed.value.value == Grant(False), "the old holder's renewal took it back"
        info = kit.admin.info("renewed")
        assert info is not None and info.owner_hint == waiter.owner_hint
        assert info.token == waiter.token
        await waiter.arelease()

    asyncio.run(main())


def test_a_waiter_of_another_process_queued_first_goes_before_this_loops_line(
    kit: LockKit, etcd_server: EtcdServer
) -> None:
    """A release here hands the lock to this loop's first waiter only if it is first in
    etcd's queue: a waiter of another kit (its own line, as another process would have)
    that queued before it is served first."""
    with LockKit(etcd_server.url, namespace=kit.namespace, ttl=10.0) as other:

        async def main() -> list[str]:
            order: list[str] = []

            async def take(on: LockKit, name: str) -> None:
                lock = on.lock("shared", fair=True)
                assert await lock.aacquire(timeout=10)
                order.append(name)
                await lock.arelease()

            holder = kit.lock("shared")
            assert await holder.aacquire()
            first = asyncio.create_task(take(other, "other kit"))
            await _queued(other, holder.full_key)
            second = asyncio.create_task(take(kit, "this kit"))
            await _queued(kit, holder.full_key)
            await holder.arelease()
            await asyncio.wait_for(asyncio.gather(first, second), 20)
            return order

        assert asyncio.run(main()) == ["other kit", "this kit"]


@pytest.mark.parametrize("waiter_ttl", [1.0, 20.0])
def test_a_lock_handed_over_keeps_the_waiters_own_ttl(kit: LockKit, waiter_ttl: float) -> None:
    """A hand-over in place puts the waiter's ttl in the record; a waiter whose ttl the
    holder's lease cannot cover (20 s after 3 s) gets the lock by the usual release."""

    async def main() -> None:
        holder = kit.lock("ttl", ttl=3.0)
        assert await holder.aacquire()
        waiter = kit.lock("ttl", ttl=waiter_ttl)
        waiting = asyncio.create_task(waiter.aacquire(timeout=10))
        lines = kit.backend.aio().lines  # type: ignore[attr-defined]

        def waits() -> bool:  # its first attempt was answered: it waits for our release
            line = lines.get(holder.full_key)
            return line is not None and line.places[0].ttl is not None and not line.places[0].busy

        while not waits():
            await asyncio.sleep(0.01)
        token = holder.token
        assert token is not None
        await holder.arelease()
        assert await waiting
        # A record handed over in place carries the holder's token plus one; a new one gets
        # a later create revision (the revoke that deleted the old record is a write too).
        assert (waiter.token == token + 1) == (waiter_ttl == 1.0)
        info = kit.admin.info("ttl")
        assert info is not None and info.owner_hint == waiter.owner_hint
        assert info.ttl_remaining is not None
        assert waiter_ttl - 1.5 < info.ttl_remaining <= waiter_ttl
        await waiter.arelease()
        assert leftovers(kit, "ttl") == []

    asyncio.run(main())


def test_waiters_of_one_loop_and_another_process_are_served_in_the_order_they_asked(
    kit: LockKit, etcd_server: EtcdServer
) -> None:
    """Every waiter of a line takes its place in etcd's queue as it asks (in batches), not
    when it reaches the front: a waiter of another kit that asks after the second waiter of
    this loop is served after it."""
    with LockKit(etcd_server.url, namespace=kit.namespace, ttl=10.0) as other:

        async def main() -> list[str]:
            order: list[str] = []

            async def take(on: LockKit, name: str) -> None:
                lock = on.lock("fifo", fair=True)
                assert await lock.aacquire(timeout=10)
                order.append(name)
                await asyncio.sleep(0.01)
                await lock.arelease()

            holder = kit.lock("fifo")
            assert await holder.aacquire()
            tasks = [asyncio.create_task(take(kit, "first here"))]
            await _queued(kit, holder.full_key)  # each is in etcd's queue before the next asks
            tasks.append(asyncio.create_task(take(kit, "second here")))
            await _queued(kit, holder.full_key, 2)
            tasks.append(asyncio.create_task(take(other, "other kit")))
            await _queued(other, holder.full_key)
            await holder.arelease()
            await asyncio.wait_for(asyncio.gather(*tasks), 20)
            return order

        assert asyncio.run(main()) == ["first here", "second here", "other kit"]


def test_a_line_whose_first_lost_its_queue_entry_is_still_served_in_order(
    kit: LockKit, etcd_server: EtcdServer
) -> None:
    """The queue lease ends under the first waiter of a line (the loop stood still for its
    3 s, say), and the waiters that come next queue on a new one: the first, queueing again,
    would be behind them in etcd while they wait for it here. Their entries are taken out
    and they queue again behind it; all are served, in the order they asked."""
    backend = kit.backend
    assert isinstance(backend, EtcdBackend)
    with LockKit(etcd_server.url, namespace=kit.namespace, ttl=10.0) as other:

        async def main() -> list[int]:
            order: list[int] = []

            async def take(i: int) -> None:
                lock = kit.lock("lost", fair=True)
                assert await lock.aacquire(timeout=10), f"waiter {i} timed out"
                order.append(i)
                await lock.arelease()

            holder = other.lock("lost")  # held elsewhere: the first waiter watches it
            assert await holder.aacquire()
            lines = backend.aio().lines
            full_key = holder.full_key

            tasks = [asyncio.create_task(take(0))]
            await _queued(kit, full_key)
            first = lines[full_key].places[0].waiter
            first_at = first.queued_at
            lease = backend.queue._lease
            assert lease is not None
            etcd_request(etcd_server.port(), "lease/revoke", {"ID": lease.id})
            tasks += [asyncio.create_task(take(1)), asyncio.create_task(take(2))]
            await _queued(kit, full_key, 3)
            while first.queued_at == first_at:  # its next look finds its entry gone
                await asyncio.sleep(0.01)
            await _queued(kit, full_key, 3)
            await holder.arelease()
            await asyncio.wait_for(asyncio.gather(*tasks), 20)
            return order

        assert asyncio.run(main()) == [0, 1, 2]
    assert leftovers(kit, "lost") == []
