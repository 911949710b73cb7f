"""Read-write locks and semaphores on a real ZooKeeper: readers share, writers exclude, FIFO
between them; a semaphore admits at most N and lists its holders."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from many_kits import kits_on
from place_queues import waiting_for_places
from polling import wait_until

from lockkit_core import ConfigError, LockKit, LockTimeout, NotSupported
from lockkit_core.backends.zookeeper.backend import ZooKeeperBackend
from lockkit_core.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def kits(zookeeper_server: ZooKeeperServer) -> Iterator[list[LockKit]]:
    url = zookeeper_server.url + "?session_timeout=4&socket_timeout=2"
    namespace = f"zs{uuid.uuid4().hex[:10]}"
    with kits_on(url, namespace, 6) as made:
        yield made


def test_readers_share_and_a_writer_waits_for_them(kits: list[LockKit]) -> None:
    a, b, w = kits[0], kits[1], kits[2]
    with a.rwlock("catalog").read(timeout=1) as r1, b.rwlock("catalog").read(timeout=1) as r2:
        assert r1.token is not None and r2.token is not None and r2.token > r1.token
        hints = {
            lease.holder.split(":")[0] for lease in a.rwlock("catalog").holders() if lease.holder
        }
        assert hints == {"reader"}
        assert len(a.rwlock("catalog").holders()) == 2
        started = time.monotonic()
        with pytest.raises(LockTimeout), w.rwlock("catalog").write(timeout=0.2):
            pass
        assert 0.2 <= time.monotonic() - started < 0.5
    with w.rwlock("catalog").write(timeout=1) as writer:
        assert writer.owned()
        with pytest.raises(LockTimeout), a.rwlock("catalog").read(timeout=0.1):
            pass
        (holder,) = w.rwlock("catalog").holders()
        assert holder.holder is not None and holder.holder.startswith("writer")
        assert holder.token == writer.token


def test_a_reader_behind_a_waiting_writer_waits_its_turn(kits: list[LockKit]) -> None:
    first, writer_kit, late = kits[0], kits[1], kits[2]
    order: list[str] = []
    first_read = first.rwlock("doc").read(timeout=5)
    assert first_read.acquire()

    def write() -> None:
        with writer_kit.rwlock("doc").write(timeout=10):
            order.append("writer")
            time.sleep(0.1)

    def read_late() -> None:
        with late.rwlock("doc").read(timeout=10):
            order.append("late reader")

    w = threading.Thread(target=write)
    w.start()
    wait_until(lambda: waiting_for_places(first, "doc") == 1)  # the writer, behind the reader
    r = threading.Thread(target=read_late)
    r.start()
    # The late reader queues behind the writer (or, wrongly, passes it: then the assert says so).
    wait_until(lambda: order != [] or waiting_for_places(first, "doc") == 2)
    assert order == [], "the late reader must not slip past the queued writer"
    first_read.release()
    w.join(10)
    r.join(10)
    assert order == ["writer", "late reader"]


def test_writers_exclude_each_other_across_kits(kits: list[LockKit]) -> None:
    inside = 0
    overlaps = 0
    count = 0
    guard = threading.Lock()

    def work(kit: LockKit) -> None:
        nonlocal inside, overlaps, count
        for _ in range(15):
            with kit.rwlock("counter").write(timeout=20):
                with guard:
                    inside += 1
                    overlaps += inside > 1
                time.sleep(0.001)
                with guard:
                    inside -= 1
                    count += 1

    threads = [threading.Thread(target=work, args=(k,)) for k in kits[:4]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert count == 60 and overlaps == 0


def test_a_semaphore_admits_at_most_its_limit_in_arrival_order(kits: list[LockKit]) -> None:
    limit = 2
    holding = 0
    most = 0
    order: list[int] = []
    guard = threading.Lock()
    release = threading.Event()
    holders = [kits[0].semaphore("exports", limit=limit), kits[1].semaphore("exports", limit=limit)]
    for sem in holders:
        assert sem.acquire(timeout=1)
    listed = kits[5].semaphore("exports", limit=limit).holders()
    assert [lease.token for lease in listed] == [sem.token for sem in holders]
    assert kits[2].semaphore("exports", limit=limit).acquire(blocking=False) is False

    def wait_place(i: int) -> None:
        nonlocal holding, most
        with kits[2 + i].semaphore("exports", limit=limit, timeout=10):
            with guard:
                order.append(i)
                holding += 1
                most = max(most, holding)
            release.wait(10)
            with guard:
                holding -= 1

    threads = [threading.Thread(target=wait_place, args=(i,)) for i in range(3)]
    for queued, t in enumerate(threads, 1):
        t.start()
        wait_until(lambda n=queued: waiting_for_places(kits[5], "exports", "slot", limit) == n)
    assert order == []
    holders[0].release()
    deadline = time.monotonic() + 5
    while order != [0] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert order == [0], "one place came free: exactly the first waiter gets it"
    holders[1].release()
    while len(order) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert order == [0, 1]
    release.set()
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2]
    assert most <= limit


def test_bad_arguments_and_backends_without_shared_locks(
    kits: list[LockKit], tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="limit"):
        kits[0].semaphore("x", limit=0)
    with pytest.raises(ConfigError, match="timeout"):
        kits[0].rwlock("x").read(timeout=-5)
    with LockKit(f"sqlite://{tmp_path / 'locks.db'}") as sqlite:
        with pytest.raises(NotSupported, match=r"sqlite:// backend has none.*lockkit backends"):
            sqlite.rwlock("x")
        with pytest.raises(NotSupported):
            sqlite.semaphore("x", limit=2)


def test_a_semaphore_release_wakes_the_waiter_it_lets_in_not_the_whole_queue(
    kits: list[LockKit],
) -> None:
    """Five waiters queue for a semaphore of one. A release wakes the first waiter (it takes
    the place) and, through that taking, the one behind it (it moves up to watch the holder):
    two wake-ups, never one per waiter."""
    holder = kits[0].semaphore("one", 1)
    assert holder.acquire(timeout=1)
    got: list[int] = []
    done = threading.Event()

    def wait_place(i: int) -> None:
        with kits[i].semaphore("one", 1, timeout=20):
            got.append(i)
            done.wait(20)

    threads = [threading.Thread(target=wait_place, args=(i,)) for i in range(1, 6)]
    for queued, t in enumerate(threads, 1):
        t.start()  # queued in this order, so the first is the one let in
        wait_until(lambda n=queued: waiting_for_places(kits[0], "one", "slot", 1) == n)
    # Their nodes are in; their watches follow each one's listing, which no store state shows.
    time.sleep(0.3)
    backends = [cast(ZooKeeperBackend, kit.backend) for kit in kits]
    before = sum(b.place_wakeups for b in backends)
    holder.release()
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.5)  # any other wake-up the release caused has arrived by now
    woken = sum(b.place_wakeups for b in backends) - before
    assert got == [1]
    assert 1 <= woken <= 2, f"one release woke {woken} waiters of 5"
    done.set()
    for t in threads:
        t.join(30)
    assert got == [1, 2, 3, 4, 5]
