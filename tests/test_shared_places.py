"""Read-write locks and semaphores on every backend that declares ``Capability.SHARED``, on
real servers: readers together, a writer alone, never more than ``limit`` holders (across
processes where the store is shared by processes), FIFO with no writer starvation, and places
that are leases like locks (ttl, renewal, ``on_lost``, adoption, a holder killed or paused)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from holders import Holder
from many_kits import kits_on
from place_queues import waiting_for_places
from polling import wait_until

from lockkit_core import LockKit, LockLost, LockTimeout
from lockkit_core.backends.base import Capability, capability_names
from lockkit_core.registry import create_backend
from lockkit_core.testing import RedisServer
from lockkit_core.testing.zookeeper import ZooKeeperServer

WORKER = Path(__file__).with_name("place_worker.py")
#: stores shared by processes (memory:// is one process's)
PROCESS_STORES = ["file", "redis", "zookeeper"]
STORES = ["memory", *PROCESS_STORES]


def _url(request: pytest.FixtureRequest, store: str) -> str:
    if store == "memory":
        return f"memory://{uuid.uuid4().hex[:8]}"
    if store == "file":
        return f"file://{request.getfixturevalue('tmp_path')}/locks"
    if store == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return server.url + "?socket_timeout=2"
    zk: ZooKeeperServer = request.getfixturevalue("zookeeper_server")
    return zk.url + "?session_timeout=4&socket_timeout=2"


def _marks(store: str) -> list[pytest.MarkDecorator]:
    return [getattr(pytest.mark, store)] if store in ("redis", "zookeeper") else []


@pytest.fixture(params=[pytest.param(s, marks=_marks(s)) for s in STORES])
def url(request: pytest.FixtureRequest) -> str:
    return _url(request, request.param)


@pytest.fixture(params=[pytest.param(s, marks=_marks(s)) for s in PROCESS_STORES])
def shared_url(request: pytest.FixtureRequest) -> str:
    return _url(request, request.param)


@pytest.fixture
def namespace() -> str:
    return f"sp{uuid.uuid4().hex[:10]}"


@pytest.fixture
def kits(url: str, namespace: str) -> Iterator[list[LockKit]]:
    with kits_on(url, namespace, 4) as made:
        yield made


def test_the_backends_say_they_have_shared_places(url: str) -> None:
    backend = create_backend(url, {})
    try:
        assert Capability.SHARED in backend.capabilities
        assert "shared" in capability_names(backend.capabilities)
    finally:
        backend.close()


def test_readers_share_a_writer_is_alone(kits: list[LockKit]) -> None:
    a, b, c = kits[0], kits[1], kits[2]
    with a.rwlock("doc").read(timeout=1) as r1, b.rwlock("doc").read(timeout=1) as r2:
        assert r1.token is not None and r2.token is not None and r1.token != r2.token
        assert sorted(lease.token or 0 for lease in c.rwlock("doc").holders()) == sorted(
            [r1.token, r2.token]
        )
        with pytest.raises(LockTimeout), c.rwlock("doc").write(timeout=0.1):
            pass
    with c.rwlock("doc").write(timeout=1) as writer:
        assert writer.token is not None and writer.token > (r2.token or 0)
        with pytest.raises(LockTimeout), a.rwlock("doc").read(timeout=0.1):
            pass
        with pytest.raises(LockTimeout), b.rwlock("doc").write(timeout=0):
            pass
        (held,) = a.rwlock("doc").holders()
        assert held.token == writer.token and (held.holder or "").startswith("writer")
    # The reader that gave up leaves the queue from a background thread (no round trip past
    # its timeout); a place the writer's release handed it before that landed is given back
    # by the same leave, within about a second on a loaded machine.
    wait_until(lambda: a.rwlock("doc").holders() == [], timeout=2.0)


def test_a_reader_behind_a_waiting_writer_waits_its_turn(kits: list[LockKit]) -> None:
    first, writer_kit, late = kits[0], kits[1], kits[2]
    order: list[str] = []
    reading = first.rwlock("doc").read(timeout=5)
    assert reading.acquire()

    def write() -> None:
        with writer_kit.rwlock("doc").write(timeout=10):
            order.append("writer")
            time.sleep(0.05)

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
    assert order == [], "the late reader must not pass the queued writer"
    reading.release()
    w.join(10)
    r.join(10)
    assert order == ["writer", "late reader"]


def test_a_semaphore_admits_at_most_its_limit_in_arrival_order(kits: list[LockKit]) -> None:
    held = [kits[0].semaphore("jobs", limit=2), kits[1].semaphore("jobs", limit=2)]
    for sem in held:
        assert sem.acquire(timeout=1)
    assert kits[2].semaphore("jobs", limit=2).acquire(blocking=False) is False
    assert [lease.token for lease in kits[3].semaphore("jobs", 2).holders()] == [
        sem.token for sem in held
    ]
    order: list[int] = []

    def wait_place(i: int) -> None:
        sem = kits[2 + i].semaphore("jobs", limit=2, timeout=10)
        with sem:
            order.append(i)
            wait_until(lambda: len(order) == 2)

    threads = [threading.Thread(target=wait_place, args=(i,)) for i in range(2)]
    for queued, t in enumerate(threads, 1):
        t.start()
        wait_until(lambda n=queued: waiting_for_places(kits[0], "jobs", "slot", 2) == n)
    assert order == []
    held[1].release()
    wait_until(lambda: order == [0])
    time.sleep(0.1)  # a while for a wrong second admission to show (load only hides it)
    assert order == [0], "one place came free: only the first waiter gets it"
    held[0].release()
    for t in threads:
        t.join(10)
    assert order == [0, 1]


def test_a_place_not_renewed_runs_out_its_holder_is_told_and_others_get_in(
    kits: list[LockKit],
) -> None:
    lost: list[object] = []
    holder = kits[0].semaphore("s", 1, ttl=0.5, auto_renew=False, on_lost=lost.append)
    assert holder.acquire(timeout=1)
    started = time.monotonic()
    with kits[1].semaphore("s", 1, timeout=5) as taker:
        waited = time.monotonic() - started
        assert 0.3 < waited < 2.5, waited
        assert taker.token is not None and taker.token > (holder.token or 0)
    wait_until(lambda: lost == [holder])
    assert holder.lost
    with pytest.raises(LockLost):
        holder.check()
    with pytest.raises(LockLost):
        holder.release()


def test_a_renewed_place_outlives_its_ttl(kits: list[LockKit]) -> None:
    # Renewed at a third of the ttl: 0.6 s leaves a loaded machine 0.2 s of slack per renewal.
    with kits[0].rwlock("r", ttl=0.6).write(timeout=1) as writer:
        time.sleep(1.5)
        writer.check()
        with pytest.raises(LockTimeout), kits[1].rwlock("r").read(timeout=0.1):
            pass
    with kits[1].rwlock("r").read(timeout=1):
        pass


def test_threads_sharing_one_read_handle_never_fail_nor_leave_a_place_held() -> None:
    """Readers may hold one ``read()`` handle in several threads at once: each thread's use
    is its own. An acquisition that raises after the store granted the place leaves it held
    (and renewed) with nobody to release it, so a writer is shut out."""
    kit = LockKit(f"memory://{uuid.uuid4().hex[:8]}", ttl=30)
    reader = kit.rwlock("catalog").read()
    errors: list[str] = []

    def read_often() -> None:
        try:
            for _ in range(1000):
                with reader:
                    time.sleep(0)  # others take and let go meanwhile
        except Exception as exc:
            errors.append(repr(exc))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: the race shows within seconds
    try:
        for _ in range(4):
            threads = [threading.Thread(target=read_often) for _ in range(16)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if errors:
                break
    finally:
        sys.setswitchinterval(interval)
    left = kit.rwlock("catalog").holders()
    kit.close()
    assert errors == [], f"a reader failed: {errors[0]}"
    assert left == [], "a read place stayed held after every reader released"


def test_a_thread_re_enters_its_read_and_a_place_is_adopted_by_its_owner_token(
    kits: list[LockKit],
) -> None:
    rw = kits[0].rwlock("catalog", ttl=5)
    with rw.read(timeout=1) as outer, rw.read(timeout=1) as inner:
        assert inner.token == outer.token  # one place, re-entered
        assert len(rw.holders()) == 1
    if Capability.HAND_OFF not in kits[0].backend.capabilities:
        return  # zookeeper: a place is its session's, as a lock is
    sem = kits[0].semaphore("jobs", 1, ttl=5)
    assert sem.acquire(timeout=1)
    fence = sem.token
    token = sem.hand_off()
    adopted = kits[1].semaphore("jobs", 1, owner=token, ttl=5)
    assert adopted.acquire() and adopted.token == fence
    assert kits[2].semaphore("jobs", 1).acquire(blocking=False) is False
    adopted.release()
    assert kits[2].semaphore("jobs", 1).acquire(blocking=False) is True


def _overlaps(log: Path) -> tuple[int, int, int]:
    """Replay the workers' log: (most holders at once, most writers at once, writers seen
    beside someone else)."""
    inside: dict[str, int] = {}
    most = most_writers = shared_writer = 0
    for line in log.read_text().splitlines():
        sign, mode = line[0], line[1:].split()[0]
        inside[mode] = inside.get(mode, 0) + (1 if sign == "+" else -1)
        total = sum(inside.values())
        most = max(most, total)
        most_writers = max(most_writers, inside.get("write", 0))
        if inside.get("write", 0) and total > 1:
            shared_writer += 1
    return most, most_writers, shared_writer


def _run_workers(
    url: str, namespace: str, places: list[str], log: Path, rounds: int = 6, together: int = 0
) -> None:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                url,
                namespace,
                "key",
                place,
                str(rounds),
                "0.02",
                str(log),
                str(together),
            ]
        )
        for place in places
    ]
    for proc in procs:
        assert proc.wait(90) == 0


def test_never_more_than_limit_holders_across_processes(
    shared_url: str, namespace: str, tmp_path: Path
) -> None:
    log = tmp_path / "slots.log"
    _run_workers(shared_url, namespace, ["slot:2"] * 4, log)
    most, _, _ = _overlaps(log)
    assert log.read_text().count("+slot") == 24
    assert most == 2, f"{most} holders at once of a semaphore of 2"


def test_readers_together_and_a_writer_alone_across_processes(
    shared_url: str, namespace: str, tmp_path: Path
) -> None:
    together = tmp_path / "readers.log"
    # each reader holds on until all three are in (at most 10 s): shared, they all are at once
    _run_workers(shared_url, namespace, ["read"] * 3, together, rounds=1, together=3)
    assert _overlaps(together)[0] == 3, "three reader processes never held the lock together"
    log = tmp_path / "rw.log"
    _run_workers(shared_url, namespace, ["read", "read", "write", "write"], log)
    _, writers, shared_writer = _overlaps(log)
    assert log.read_text().count("+write") == 12
    assert writers == 1 and shared_writer == 0, "a writer held the lock beside someone"


@pytest.mark.parametrize("place", ["slot:1", "write"])
def test_a_sigkilled_holder_frees_its_place_after_its_ttl(
    shared_url: str, namespace: str, place: str
) -> None:
    holder = Holder(shared_url, namespace, "job", ttl=1.0, auto_renew=True, place=place)
    kit = LockKit(shared_url, namespace=namespace)
    try:
        token, _ = holder.acquired()
        other = kit.semaphore("job", 1) if place == "slot:1" else kit.rwlock("job").read()
        assert other.acquire(blocking=False) is False
        holder.signal(signal.SIGKILL)
        killed = time.monotonic()
        holder.proc.wait(5)
        assert other.acquire(timeout=5)
        waited = time.monotonic() - killed
        assert waited <= 2.5, f"the place was free only {waited:.3f} s after the kill"
        assert other.token is not None and other.token > token
        other.release()
    finally:
        holder.close()
        kit.close()


def test_on_lost_fires_when_the_lease_of_a_paused_holder_runs_out(
    shared_url: str, namespace: str
) -> None:
    holder = Holder(shared_url, namespace, "job", ttl=1.0, auto_renew=True, place="slot:1")
    kit = LockKit(shared_url, namespace=namespace)
    try:
        token, _ = holder.acquired()
        holder.signal(signal.SIGSTOP)
        with kit.semaphore("job", 1, timeout=5) as taker:
            assert taker.token is not None and taker.token > token
            holder.signal(signal.SIGCONT)
            holder.expect("on_lost", timeout=5)
            assert holder.answer("check") == "lost"
            assert holder.answer("release") == "lost"
            (held,) = taker.holders()
            assert held.token == taker.token  # the resumed holder freed nothing
    finally:
        holder.close()
        kit.close()
