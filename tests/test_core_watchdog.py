"""The watchdog against real stores: a released lock is never reported lost, a leaked hold stops
being renewed and frees itself, and one watchdog thread serves every kit of the process."""

from __future__ import annotations

import _thread
import gc
import os
import random
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockkit_core import Lock, LockKit, LockLost
from lockkit_core.testing import RedisServer

BACKENDS = ["file", pytest.param("redis", marks=pytest.mark.redis)]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path / 'locks'}"
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url + "?socket_timeout=2&socket_connect_timeout=2"


@pytest.fixture
def kit(url: str) -> Iterator[LockKit]:
    kit = LockKit(url, namespace=f"wd{uuid.uuid4().hex[:10]}")
    yield kit
    kit.close()


def _wait_free(kit: LockKit, key: str, within: float) -> float:
    started = time.monotonic()
    while kit.admin.info(key) is not None:
        if time.monotonic() - started > within:
            raise AssertionError(f"{key!r} was still held {within} s later")
        time.sleep(0.02)
    return time.monotonic() - started


def test_a_released_lock_is_never_reported_lost_while_renewals_race_the_release(
    kit: LockKit,
) -> None:
    """Release each lock within a millisecond of its first renewal, so that releases land
    while an extension is in flight; no clean release may be followed by on_lost."""
    lost: set[int] = set()
    clean: set[int] = set()
    rng = random.Random(6)
    ttl = 0.03
    for i in range(600):

        def on_lost(lock: Lock, i: int = i) -> None:
            lost.add(i)

        lock = kit.lock("race", ttl=ttl, auto_renew=True, on_lost=on_lost)
        assert lock.acquire(timeout=5)
        time.sleep(ttl / 3 + rng.uniform(-0.001, 0.001))
        try:
            lock.release()
        except LockLost:
            continue  # the machine stalled past the lease: a real loss, reported as one
        clean.add(i)
    time.sleep(0.2)  # let any renewal still in flight finish
    assert len(clean) > 500, "the machine is too loaded for this test to mean anything"
    reported = sorted(lost & clean)
    assert not reported, f"on_lost fired after a clean release in rounds {reported}"


def test_a_dropped_handle_stops_being_renewed_and_warns(kit: LockKit) -> None:
    # 1.5 s: the key must still be held after del + gc.collect(), which a loaded machine can
    # stretch past a shorter lease; an unrenewed hold still frees itself within ttl + 2 s.
    ttl = 1.5
    with pytest.warns(ResourceWarning, match="dropped"):
        lock = kit.lock("leaked-handle", ttl=ttl, auto_renew=True)
        assert lock.acquire(timeout=5)
        del lock
        gc.collect()
        assert kit.admin.info("leaked-handle") is not None
        took = _wait_free(kit, "leaked-handle", within=ttl + 2.0)
    assert took <= ttl + 2.0


def test_a_hold_whose_thread_died_stops_being_renewed_and_warns(kit: LockKit) -> None:
    ttl = 0.6
    lock = kit.lock("leaked-thread", ttl=ttl, auto_renew=True)  # reentrant: per thread
    with pytest.warns(ResourceWarning, match="leaked-thread"):
        worker = threading.Thread(target=lambda: lock.acquire(timeout=5))
        worker.start()
        worker.join()
        assert kit.admin.info("leaked-thread") is not None
        _wait_free(kit, "leaked-thread", within=ttl + 2.0)
    assert lock.lost or lock.token is None
    assert lock.acquire(timeout=5), "the handle is usable again once the leak expired"
    lock.release()


def test_a_hold_whose_foreign_thread_died_stops_being_renewed_and_warns(kit: LockKit) -> None:
    """As above, for a thread not started by threading (a C extension's, an embedding
    server's): its dummy Thread object never reports that it exited."""
    ttl = 0.6
    lock = kit.lock("leaked-foreign", ttl=ttl, auto_renew=True)  # reentrant: per thread
    done = threading.Event()

    def leak() -> None:
        try:
            lock.acquire(timeout=5)
        finally:
            done.set()

    with pytest.warns(ResourceWarning, match="leaked-foreign"):
        _thread.start_new_thread(leak, ())
        assert done.wait(10)
        assert kit.admin.info("leaked-foreign") is not None
        _wait_free(kit, "leaked-foreign", within=ttl + 2.0)


def test_a_non_reentrant_hold_outlives_the_thread_that_took_it(kit: LockKit) -> None:
    """It belongs to its acquisition: the thread exiting is no leak, renewal goes on."""
    ttl = 0.6
    lock = kit.lock("handed-on", ttl=ttl, auto_renew=True, reentrant=False)
    worker = threading.Thread(target=lambda: lock.acquire(timeout=5))
    worker.start()
    worker.join()
    time.sleep(3 * ttl)
    assert kit.admin.info("handed-on") is not None
    lock.check()
    lock.release()


def _threads_and_fds() -> tuple[int, int]:
    return threading.active_count(), len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_dropped_kits_leak_neither_threads_nor_descriptors(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'locks'}"
    warm = LockKit(url, namespace="warm")
    with warm.lock("k"):
        pass
    gc.collect()
    threads_before, fds_before = _threads_and_fds()
    dropped = []
    for i in range(200):
        kit = LockKit(url, namespace=f"kit{i}")
        with kit.lock("k", ttl=5):
            pass
        dropped.append(weakref.ref(kit))
        del kit
    gc.collect()
    assert all(ref() is None for ref in dropped), "something still refers to dropped kits"
    threads_after, fds_after = _threads_and_fds()
    assert threads_after <= threads_before + 1, (
        f"{threads_after - threads_before} threads more after 200 dropped kits"
    )
    assert fds_after <= fds_before + 5, f"{fds_after - fds_before} descriptors more"
    watchdogs = [t for t in threading.enumerate() if t.name == "lockkit-watchdog"]
    assert len(watchdogs) <= 1
    warm.close()


def test_one_watchdog_thread_renews_locks_of_many_kits(url: str) -> None:
    kits = [LockKit(url, namespace=f"many{uuid.uuid4().hex[:8]}") for _ in range(5)]
    locks = [kit.lock("k", ttl=0.3) for kit in kits]
    for lock in locks:
        assert lock.acquire(timeout=5)
    time.sleep(1.0)
    for lock in locks:
        lock.check()  # renewed past three ttls
        lock.release()
    watchdogs = [t for t in threading.enumerate() if t.name == "lockkit-watchdog"]
    assert len(watchdogs) == 1
    for kit in kits:
        kit.close()


@pytest.mark.parametrize("auto_renew", [False, True])
def test_a_release_that_finds_the_lease_gone_reports_it_lost_once(
    kit: LockKit, auto_renew: bool
) -> None:
    """The owner learns of a loss from on_lost whoever notices it first: here the release
    itself, before the watchdog's next look (an admin freed the key meanwhile)."""
    seen: list[Lock] = []
    lock = kit.lock(f"gone:{uuid.uuid4().hex}", ttl=30, auto_renew=auto_renew, on_lost=seen.append)
    assert lock.acquire()
    assert kit.admin.force_release(lock.key)
    with pytest.raises(LockLost):
        lock.release()
    assert seen == [lock]
    time.sleep(0.05)
    assert seen == [lock], "reported once"


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "per-acquisition"])
def test_a_dropped_handle_without_a_lease_frees_its_key_and_warns(
    tmp_path: Path, reentrant: bool
) -> None:
    # No lease runs out: without this, the key stays held for the life of the process.
    with LockKit(f"file://{tmp_path / 'locks'}") as kit:
        with pytest.warns(ResourceWarning, match="'forever'.*dropped"):
            lock = kit.lock("forever", ttl=None, reentrant=reentrant)
            assert lock.acquire(timeout=5)
            del lock
            gc.collect()
        assert kit.admin.info("forever") is None
        again = kit.lock("forever", ttl=None, reentrant=reentrant)
        assert again.acquire(timeout=0)
        again.release()


def test_a_lease_less_hold_re_entered_by_a_live_handle_is_kept(tmp_path: Path) -> None:
    with LockKit(f"file://{tmp_path / 'locks'}") as kit:
        first = kit.lock("kept", ttl=None)
        assert first.acquire(timeout=5)
        second = kit.lock("kept", ttl=None)
        assert second.acquire(timeout=0)  # re-entered: the same hold
        del first
        gc.collect()
        assert kit.admin.info("kept") is not None
        second.release()


def test_released_holds_do_not_wake_the_watchdog_one_by_one() -> None:
    """Every acquisition schedules a renewal at ttl/3; most holds are released long before.
    Waking up for each released one would take the GIL from the application once per
    acquisition, a third of a ttl later: a busy server's request threads would stall on it.
    They are dropped in bulk whenever the watchdog is awake anyway."""
    from lockkit_core.watchdog import Watchdog

    wakes = 0

    class Counting(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            nonlocal wakes
            wakes += 1
            return super().wait(timeout)

    watchdog = Watchdog()
    watchdog._cond = Counting()
    kit = LockKit("memory://", namespace=f"t{uuid.uuid4().hex[:8]}", ttl=3)
    try:
        held = kit.lock("held", ttl=30)  # an active hold keeps the watchdog's heap busy
        held.acquire()
        hold = held._here()
        assert hold is not None
        watchdog.watch(hold)
        for i in range(200):
            lock = kit.lock(f"k{i}")
            lock.acquire()
            inner = lock._here()
            assert inner is not None
            watchdog.watch(inner)  # due ttl/4..ttl/3 from now, like every acquisition's renewal
            lock.release()
            time.sleep(0.001)
        time.sleep(1.2)  # every released hold is now past its due time
        assert wakes < 20, f"the watchdog woke {wakes} times for 200 released holds"
        held.release()
    finally:
        kit.close()
