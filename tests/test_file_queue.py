"""The ``file://`` queue of waiters with real processes: turns, hand-overs, waiters that give
up, die or stop, lapsed leases, a full queue and a long one."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from file_processes import (
    OWNER_A,
    OWNER_B,
    OWNER_C,
    ask,
    pause_outside_flock,
    read_line,
    start,
    stop,
)
from polling import wait_until

from lockkit_core import LockKit
from lockkit_core.backends.base import owner_hint
from lockkit_core.backends.file import FileBackend, file_name, wakeups
from lockkit_core.backends.file import queue as file_queue
from lockkit_core.backends.file.record import hint_of
from lockkit_core.backends.file.store import peek
from lockkit_core.registry import create_backend

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="file:// needs fcntl")


# -- the queue of waiters --------------------------------------------------------------------

# Takes the lock for SECONDS in a loop, holding it HOLD seconds each time; checks exclusion like
# INCREMENTER. Prints "ready", waits for a line, then prints the overlaps and one
# "asked:got:token" per section.
CONTENDER = r"""
import os, sys, time
from lockkit_core import LockKit
url, counter, marker = sys.argv[1], sys.argv[2], sys.argv[3]
seconds, hold = float(sys.argv[4]), float(sys.argv[5])
lock = LockKit(url, auto_renew=False).lock("fair", timeout=10)
with lock:
    pass
print("ready", flush=True)
sys.stdin.readline()
stop = time.monotonic() + seconds
overlaps = 0
sections = []
while True:
    asked = time.monotonic()
    if asked >= stop:
        break
    with lock:
        got = time.monotonic()
        try:
            inside = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            overlaps += 1
            inside = -1
        with open(counter, "r+") as f:
            value = int(f.read())
            f.seek(0)
            f.write(str(value + 1))
            f.truncate()
        while time.monotonic() < got + hold:
            pass
        if inside >= 0:
            os.close(inside)
            os.unlink(marker)
        sections.append(f"{asked!r}:{got!r}:{lock.token}")
print(overlaps, " ".join(sections), flush=True)
"""

# Prints "ready", and on a line from stdin waits for the lock with TIMEOUT and TTL: prints
# "timeout", or "acquired <token>" and then releases it on the next line ("released" | "lost").
WAITER = r"""
import sys
from lockkit_core import LockKit, LockLost
url, key, timeout, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
lock = LockKit(url, auto_renew=False).lock(key, ttl=ttl)
print("ready", flush=True)
sys.stdin.readline()
if not lock.acquire(timeout=timeout):
    print("timeout", flush=True)
    sys.exit(0)
print("acquired", lock.token, flush=True)
sys.stdin.readline()
try:
    lock.release()
    print("released", flush=True)
except LockLost:
    print("lost", flush=True)
"""


def queue_of(url: str, key: str) -> list[str]:
    """The owners queued on ``key``, oldest first (as the hints of their tokens)."""
    record = peek(os.path.join(url[len("file://") :], file_name(key)))
    assert record is not None
    return [hint_of(line.split(b" ")[0]) for line in record.queue.splitlines()]


def ready_waiter(url: str, key: str, timeout: str, ttl: str) -> subprocess.Popen[str]:
    """A WAITER process, started and ready to queue on ``key`` when told (:func:`queue_up`)."""
    proc = start(WAITER, url, key, timeout, ttl)
    assert read_line(proc) == "ready"
    return proc


def queue_up(
    url: str, key: str, timeout: str, ttl: str, proc: subprocess.Popen[str] | None = None
) -> subprocess.Popen[str]:
    """A WAITER process (``proc`` if given, already ready) that has joined the queue of ``key``."""
    before = len(queue_of(url, key))
    if proc is None:
        proc = ready_waiter(url, key, timeout, ttl)
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    wait_until(lambda: len(queue_of(url, key)) == before + 1)
    return proc


@pytest.fixture(params=["bell", "polling"])
def bells(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Waiters woken by a datagram (on Linux), and waiters that only look at the record."""
    if request.param == "polling":
        monkeypatch.setattr(wakeups, "ABSTRACT", False)
    elif not wakeups.ABSTRACT:
        pytest.skip("wake-up sockets need Linux")
    return str(request.param)


def test_contending_processes_are_served_in_turn(url: str, tmp_path: Path) -> None:
    counter, marker = tmp_path / "counter", tmp_path / "inside"
    counter.write_text("0")
    procs = [start(CONTENDER, url, str(counter), str(marker), "1.5", "0.0005") for _ in range(6)]
    try:
        for proc in procs:
            assert read_line(proc) == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = [read_line(proc, timeout=30).split() for proc in procs]
    finally:
        for proc in procs:
            stop(proc)
    assert [r[0] for r in reports] == ["0"] * 6, "two processes were inside at once"
    sections = sorted(
        (float(got), float(got) - float(asked), int(token), who)
        for who, report in enumerate(reports)
        for asked, got, token in (item.split(":") for item in report[1:])
    )
    assert int(counter.read_text()) == len(sections)
    tokens = [token for _, _, token, _ in sections]
    assert tokens == sorted(set(tokens)), "tokens increase in the order of the grants"
    counts = [len(report) - 1 for report in reports]
    assert min(counts) > 0 and min(counts) >= max(counts) // 2, counts
    longest = max(wait for _, wait, _, _ in sections)
    assert longest < 0.5, f"a process waited {longest:.3f} s"
    turns = sum(1 for a, b in itertools.pairwise(sections) if a[3] != b[3])
    assert turns / (len(sections) - 1) > 0.9, "the releaser took the lock straight back"


def test_a_waiter_that_gives_up_passes_a_handed_lock_on(url: str, bells: str) -> None:
    a, b, c = (create_backend(url) for _ in range(3))
    try:
        first = a.try_acquire("k", OWNER_A, 30.0).token
        assert first is not None
        waiting_b = b.waiter("k", OWNER_B, False)
        assert not b.try_acquire("k", OWNER_B, 30.0).acquired
        waiting_c = c.waiter("k", OWNER_C, False)
        assert not c.try_acquire("k", OWNER_C, 30.0).acquired
        assert queue_of(url, "k") == [owner_hint(OWNER_B), owner_hint(OWNER_C)]
        assert a.release("k", OWNER_A) is True
        handed = a.info("k")
        assert (
            handed is not None
            and handed.owner_hint == owner_hint(OWNER_B)
            and handed.token == first + 1
        )
        waiting_b.close(acquired=False)  # gave up before it noticed
        passed = a.info("k")
        assert (
            passed is not None
            and passed.owner_hint == owner_hint(OWNER_C)
            and passed.token == first + 2
        )
        began = time.monotonic()
        grant = waiting_c.wait(5.0)
        assert grant is not None and grant.acquired and grant.token == first + 2
        assert grant.since is not None and grant.since < began
        assert time.monotonic() - began < 1.0
        waiting_c.close(acquired=True)
        assert queue_of(url, "k") == []
        assert c.release("k", OWNER_C) is True
        assert a.info("k") is None
    finally:
        for backend in (a, b, c):
            backend.close()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts (it appends them): each is killed, if still running, and
    reaped afterwards, even one the test left stopped."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        stop(proc)  # SIGKILL ends a stopped process as well


def test_a_waiter_that_times_out_leaves_no_ghost(
    kit: LockKit, url: str, procs: list[subprocess.Popen[str]]
) -> None:
    held = kit.lock("ghost", ttl=30)
    assert held.acquire()
    # Both processes are started first, so the second joins the queue well before the
    # first gives up, however slowly a loaded machine starts Python.
    procs.append(late := ready_waiter(url, "ghost", "10", "30"))
    procs.append(early := ready_waiter(url, "ghost", "0.4", "30"))
    queue_up(url, "ghost", "0.4", "30", early)
    queue_up(url, "ghost", "10", "30", late)
    assert read_line(early) == "timeout"
    assert len(queue_of(url, "ghost")) == 1, "the waiter that gave up left the queue"
    began = time.monotonic()
    held.release()
    assert read_line(late).split()[0] == "acquired"
    assert time.monotonic() - began < 0.5
    info = kit.admin.info("ghost")
    assert info is not None and info.holder is not None
    assert info.holder.endswith(f"pid {late.pid}")
    assert ask(late, "release") == "released"
    assert kit.admin.info("ghost") is None


def test_a_killed_waiter_does_not_hold_up_the_queue(
    kit: LockKit, url: str, procs: list[subprocess.Popen[str]]
) -> None:
    held = kit.lock("killed", ttl=30)
    assert held.acquire()
    for _ in range(3):
        procs.append(queue_up(url, "killed", "10", "30"))
    first, second, third = procs
    first.send_signal(signal.SIGKILL)
    first.wait(10)  # reaped: its pid is gone
    began = time.monotonic()
    held.release()  # skips the dead waiter
    assert read_line(second).split()[0] == "acquired"
    assert time.monotonic() - began < 0.5
    assert len(queue_of(url, "killed")) == 1
    second.send_signal(signal.SIGKILL)  # dies holding the lock handed to it
    second.wait(10)
    began = time.monotonic()
    assert read_line(third).split()[0] == "acquired"
    assert time.monotonic() - began < 0.5, "the dead holder's lease was 30 s"
    assert ask(third, "release") == "released"
    assert kit.admin.info("killed") is None


def test_a_stopped_waiters_entry_lapses(
    kit: LockKit, url: str, procs: list[subprocess.Popen[str]]
) -> None:
    held = kit.lock("stopped", ttl=30)
    assert held.acquire()
    procs.append(stopped := queue_up(url, "stopped", "10", "0.3"))
    procs.append(patient := queue_up(url, "stopped", "10", "30"))
    pause_outside_flock(stopped)
    time.sleep(0.7)  # its entry lives twice its 0.3 s lease unless renewed
    held.release()
    assert read_line(patient).split()[0] == "acquired"
    stopped.send_signal(signal.SIGCONT)  # queues again, behind the holder
    wait_until(lambda: len(queue_of(url, "stopped")) == 1)
    assert ask(patient, "release") == "released"
    assert read_line(stopped).split()[0] == "acquired"
    assert ask(stopped, "release") in ("released", "lost")  # its lease is 0.3 s


def test_a_lapsed_lease_goes_to_the_queue_not_to_a_non_blocking_caller(
    url: str, kit: LockKit, bells: str
) -> None:
    a, b = create_backend(url), create_backend(url)
    try:
        first = a.try_acquire("lapsed", OWNER_A, 0.2).token
        assert first is not None
        waiting = b.waiter("lapsed", OWNER_B, False)
        assert not b.try_acquire("lapsed", OWNER_B, 30.0).acquired
        time.sleep(0.3)  # A's lease ran out without a release
        assert kit.lock("lapsed").acquire(blocking=False) is False
        assert not a.try_acquire("lapsed", OWNER_C, 30.0).acquired
        info = a.info("lapsed")
        assert info is not None and info.owner_hint == owner_hint(OWNER_B)
        grant = waiting.wait(5.0)
        assert grant is not None and grant.token == first + 1
        waiting.close(acquired=True)
        assert b.release("lapsed", OWNER_B) is True
        assert kit.lock("lapsed").acquire(blocking=False) is True
    finally:
        a.close()
        b.close()


def test_force_release_hands_the_lock_to_the_oldest_waiter(backend: FileBackend) -> None:
    first = backend.try_acquire("forced", OWNER_A, 30.0).token
    assert first is not None
    waiting = backend.waiter("forced", OWNER_B, False)
    assert not backend.try_acquire("forced", OWNER_B, 30.0).acquired
    assert backend.force_release("forced") is True
    info = backend.info("forced")
    assert info is not None and info.owner_hint == owner_hint(OWNER_B) and info.token == first + 1
    assert backend.release("forced", OWNER_A) is False
    waiting.close(acquired=False)
    assert backend.info("forced") is None


def test_a_full_queue_makes_late_callers_poll(
    backend: FileBackend, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_queue, "MAX_QUEUE", 1)
    assert backend.try_acquire("full", OWNER_A, 30.0).acquired
    first = backend.waiter("full", OWNER_B, False)
    assert not backend.try_acquire("full", OWNER_B, 30.0).acquired
    late = backend.waiter("full", OWNER_C, False)
    assert not backend.try_acquire("full", OWNER_C, 30.0).acquired
    assert queue_of(url, "full") == [owner_hint(OWNER_B)]
    assert late.wait(0.001) is None  # polls, and joins at its next attempt with room
    assert backend.release("full", OWNER_A) is True
    assert not backend.try_acquire("full", OWNER_C, 30.0).acquired
    assert queue_of(url, "full") == [owner_hint(OWNER_C)]
    first.close(acquired=False)  # passes the lock on to the late caller
    info = backend.info("full")
    assert info is not None and info.owner_hint == owner_hint(OWNER_C)
    late.close(acquired=False)
    assert backend.info("full") is None


def test_a_long_queue_leaves_a_small_file(backend: FileBackend, url: str) -> None:
    assert backend.try_acquire("long", OWNER_A, 30.0).acquired
    owners = [f"{n:08x}" + "0" * 24 for n in range(60)]
    waiters = []
    for owner in owners:
        waiters.append(backend.waiter("long", owner, False))
        assert not backend.try_acquire("long", owner, 30.0).acquired
    path = Path(backend.directory, file_name("long"))
    assert queue_of(url, "long") == [owner_hint(owner) for owner in owners]
    assert path.stat().st_size > 4096
    for waiter in waiters:
        waiter.close(acquired=False)
    assert queue_of(url, "long") == []
    assert path.stat().st_size <= 4096, "read in one go again"
    assert backend.release("long", OWNER_A) is True


def test_a_record_written_before_queues_is_read(backend: FileBackend) -> None:
    path = Path(backend.directory, file_name("old"))
    expires = time.monotonic() + 30
    path.write_bytes(
        b"lockkit-file/1 5 %s %r 30.0 %s 3\nold\n" % (OWNER_A.encode(), expires, backend._store.me)
    )
    assert not backend.try_acquire("old", OWNER_B, 30.0).acquired
    assert backend.release("old", OWNER_A) is True
    grant = backend.try_acquire("old", OWNER_B, 30.0)
    assert grant.acquired and grant.token == 6


def test_a_process_that_queued_lately_queues_on_its_first_attempt(backend: FileBackend) -> None:
    assert backend.queue_first() is False
    assert backend.try_acquire("first", OWNER_A, 30.0).acquired
    uncontended = backend.waiter("other", OWNER_B, False)
    assert backend.try_acquire("other", OWNER_B, 30.0).acquired  # free: not queued
    uncontended.close(acquired=True)
    assert backend.queue_first() is False
    waiting = backend.waiter("first", OWNER_B, False)
    assert not backend.try_acquire("first", OWNER_B, 30.0).acquired
    waiting.close(acquired=False)
    assert backend.queue_first() is True
