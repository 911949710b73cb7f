"""zookeeper:// hand-off on a real server: what a release costs the waiters.

The next waiter holds the lock on the release's notice without a request (its claim follows a
moment later, or goes with its release); the waiter behind it is not woken by that claim and
sends nothing; and a waiter that
learns of the new holder's claim that way still removes a holder that stops renewing when its
lease runs out, not at its own session-timeout fallback. Requests are counted on each kit's
real client (a counter around its calls), the server is real.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from many_kits import kits_on
from polling import await_until, wait_until

from lockkit_core import Lock, LockKit
from lockkit_core.backends.zookeeper import ZooKeeperBackend
from lockkit_core.testing.zookeeper import ZooKeeperServer, four_letter

pytestmark = pytest.mark.zookeeper

_REQUESTS = (
    "create_async",
    "get_children_async",
    "exists_async",
    "get_async",
    "set_async",
    "delete_async",
    "ensure_path_async",
    "transaction",
)


@pytest.fixture
def kits(zookeeper_server: ZooKeeperServer) -> Iterator[list[LockKit]]:
    namespace = f"zh{uuid.uuid4().hex[:10]}"
    url = zookeeper_server.url + "?session_timeout=4&socket_timeout=2"
    with kits_on(url, namespace, 3) as made:
        yield made


def _count_requests(kit: LockKit) -> Counter[str]:
    """A counter of the requests ``kit``'s client sends from now on (its real client)."""
    backend = kit.backend
    assert isinstance(backend, ZooKeeperBackend)
    client = backend.session.client()
    sent: Counter[str] = Counter()

    def counted(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            sent[name] += 1
            return method(*args, **kwargs)

        return call

    for name in _REQUESTS:
        setattr(client, name, counted(name, getattr(client, name)))
    return sent


def _queued(kit: LockKit, key: str) -> int:
    backend = kit.backend
    assert isinstance(backend, ZooKeeperBackend)
    return len(backend.session.run(backend.tree.children(f"{kit.namespace}:{key}")))


def _all_watched(server: ZooKeeperServer, kit: LockKit, key: str) -> Callable[[], bool]:
    """A check: is every node but the last now in ``key``'s queue watched (by the one behind)?"""
    backend = kit.backend
    assert isinstance(backend, ZooKeeperBackend)
    full = f"{kit.namespace}:{key}"
    parent = backend.tree.parent(full)
    ahead = {f"{parent}/{name}" for name in backend.session.run(backend.tree.children(full))[:-1]}
    return lambda: ahead <= set(four_letter(server.port, "wchp").split())


def _watches_set(server: ZooKeeperServer, kit: LockKit, key: str) -> None:
    """Wait until every node but the last in ``key``'s queue is watched (by the one behind)."""
    wait_until(_all_watched(server, kit, key))


class _Contender:
    """A thread that waits for ``lock``, notes when it holds it, holds until told to go."""

    def __init__(self, lock: Lock) -> None:
        self.lock = lock
        self.holding = threading.Event()
        self.go = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            assert self.lock.acquire(timeout=20)
            self.holding.set()
            self.go.wait(20)
            self.lock.release()
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
            self.holding.set()

    def finish(self) -> None:
        self.go.set()
        self.thread.join(20)
        assert not self.errors, self.errors[0]


def _held_with_two_waiting(
    kits: list[LockKit], server: ZooKeeperServer, key: str
) -> tuple[Lock, _Contender, _Contender]:
    """``key`` held through the first kit, and a contender of each of the next two queued
    behind it in that order, each watching the node ahead of it."""
    holder, first_kit, second_kit = kits
    held = holder.lock(key)
    assert held.acquire()
    first = _Contender(first_kit.lock(key))
    wait_until(lambda: _queued(holder, key) == 2)
    second = _Contender(second_kit.lock(key))
    wait_until(lambda: _queued(holder, key) == 3)
    _watches_set(server, holder, key)
    return held, first, second


def test_a_release_hands_off_with_no_request_and_wakes_nobody_else(
    kits: list[LockKit], zookeeper_server: ZooKeeperServer
) -> None:
    _, first_kit, second_kit = kits
    held, first, second = _held_with_two_waiting(kits, zookeeper_server, "relay")
    by_first, by_second = _count_requests(first_kit), _count_requests(second_kit)
    try:
        held.release()
        assert first.holding.wait(10)
        assert not by_first, f"the next waiter asked the server before holding: {by_first}"
        wait_until(lambda: by_first["set_async"] >= 1)  # the first's claim, sent a moment later
        time.sleep(0.3)  # it reaches the server and fires the second's watch: a wrong wake-up
        # of the second, or a second request of the first, would show by now
        assert by_first == Counter(set_async=1), "the next waiter asked the server again"
        assert not by_second, f"the claim ahead woke the waiter behind it: {by_second}"
        assert not second.holding.is_set()
        first.go.set()
        assert second.holding.wait(10)
        assert not by_second, f"the last waiter asked the server before holding: {by_second}"
        wait_until(lambda: by_second["set_async"] >= 1)  # its claim
        time.sleep(0.3)  # any request more would show by now
        assert by_second == Counter(set_async=1)
    finally:
        first.finish()
        second.finish()


def test_a_release_before_the_claim_claims_and_deletes_in_one_write(
    kits: list[LockKit], zookeeper_server: ZooKeeperServer
) -> None:
    # The first waiter releases before its claim is sent: the release stamps and deletes its
    # node in one transaction, and the waiter behind (which queued behind a waiter, so only
    # that stamp tells it the node ahead held the lock) takes over on the notice alone.
    _, first_kit, second_kit = kits
    held, first, second = _held_with_two_waiting(kits, zookeeper_server, "quick")
    by_first, by_second = _count_requests(first_kit), _count_requests(second_kit)
    try:
        first.go.set()  # it releases as soon as it holds
        held.release()
        assert second.holding.wait(10)
        # One write: the transaction (then, maybe, a read to see if the key is free).
        assert by_first["transaction"] == 1, by_first
        assert not by_first["set_async"] and not by_first["delete_async"], by_first
        assert not by_second, f"the last waiter asked the server before holding: {by_second}"
    finally:
        first.finish()
        second.finish()


def test_a_holder_that_stops_renewing_is_removed_when_its_lease_ends(
    kits: list[LockKit], zookeeper_server: ZooKeeperServer
) -> None:
    # The third contender queues behind a waiter; that waiter then takes the lock with a
    # 0.6 s lease and never renews it. The third learns of the claim from its watch alone,
    # and must take the lock when that lease is over, well before its 4 s session fallback.
    holder, first_kit, third_kit = kits
    held = holder.lock("stale")
    assert held.acquire()
    stuck = first_kit.lock("stale", ttl=0.6, auto_renew=False)
    got = threading.Event()

    def take_and_keep() -> None:
        assert stuck.acquire(timeout=20)
        got.set()

    threading.Thread(target=take_and_keep, daemon=True).start()
    wait_until(lambda: _queued(holder, "stale") == 2)
    third = _Contender(third_kit.lock("stale"))
    wait_until(lambda: _queued(holder, "stale") == 3)
    _watches_set(zookeeper_server, holder, "stale")
    try:
        held.release()
        assert got.wait(10)
        taken = time.monotonic()
        assert third.holding.wait(10)
        waited = time.monotonic() - taken
        assert 0.45 < waited < 2.0, f"took the stale holder's place after {waited:.2f} s"
        assert not third.errors
    finally:
        third.finish()


def test_an_asyncio_hand_over_in_one_process_is_one_request(
    kits: list[LockKit], zookeeper_server: ZooKeeperServer
) -> None:
    # Twenty tasks of one kit queue on one key; the lock then passes down the queue, each
    # task releasing as soon as it holds it. A hand-over is the release alone: the next task
    # takes the lock on its watch (no read of its turn), and the release does not ask whether
    # the key is free while a task of this kit still has a node queued on it.
    kit = kits[0]
    waiters = 20

    async def main() -> Counter[str]:
        holder = kit.lock("drain")
        assert await holder.aacquire()

        async def waiter() -> None:
            lock = kit.lock("drain", fair=True)
            assert await lock.aacquire(timeout=20)
            await lock.arelease()

        tasks = [asyncio.create_task(waiter()) for _ in range(waiters)]
        deadline = time.monotonic() + 20
        await await_until(lambda: _queued(kit, "drain") >= waiters + 1, 20)
        # each task's watch on the node ahead is set
        watched = _all_watched(zookeeper_server, kit, "drain")
        await await_until(watched, deadline - time.monotonic())
        sent = _count_requests(kit)
        await holder.arelease()
        await asyncio.gather(*tasks)
        return sent

    sent = asyncio.run(main())
    handovers = waiters + 1  # the holder's release, then each task's
    # The last release of all may still ask whether the key is free (one read, one delete).
    assert sum(sent.values()) <= handovers + 2, f"{dict(sent)} for {handovers} releases"
    _parent_removed(kit, "drain")


def _parent_removed(kit: LockKit, key: str) -> None:
    """Wait until ``key``'s parent node is gone (a free key leaves nothing behind)."""
    backend = kit.backend
    assert isinstance(backend, ZooKeeperBackend)
    parent = backend.tree.parent(f"{kit.namespace}:{key}")
    client = backend.session.client()
    wait_until(lambda: client.exists(parent) is None)


def test_waiters_that_give_up_behind_a_holder_leave_no_parent_behind(kits: list[LockKit]) -> None:
    # The leaving waiters see the holder's node still there and leave the parent to it; the
    # holder, releasing last, removes it.
    kit = kits[0]

    async def main() -> None:
        holder = kit.lock("gaveup")
        assert await holder.aacquire()

        async def waiter() -> bool:
            return await kit.lock("gaveup", fair=True).aacquire(timeout=0.5)

        assert not any(await asyncio.gather(*(waiter() for _ in range(5))))
        await holder.arelease()

    asyncio.run(main())
    _parent_removed(kit, "gaveup")
