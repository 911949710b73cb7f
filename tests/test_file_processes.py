"""The ``file://`` backend across real processes and threads: exclusion, a holder SIGKILLed,
exiting or SIGSTOPped past its ttl, and forked children (neither releasing the parent's lock nor
sharing its flocks)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from file_processes import (
    HOLDER,
    OWNER_A,
    ask,
    fence,
    pause_outside_flock,
    read_line,
    start,
    stop,
)

from lockkit_core import (
    LockKit,
    LockNotOwned,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="file:// needs fcntl")

# Increments a counter file N times under the lock; an O_EXCL marker file catches two
# processes inside at once. Prints "ready", waits for a line on stdin, prints the overlaps.
INCREMENTER = r"""
import os, sys
from lockkit_core import LockKit
url, counter, marker, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
kit = LockKit(url, auto_renew=False)
tokens = []
overlaps = 0
print("ready", flush=True)
sys.stdin.readline()
for _ in range(rounds):
    with kit.lock("counter", timeout=60) as held:
        tokens.append(held.token)
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
        if inside >= 0:
            os.close(inside)
            os.unlink(marker)
print(overlaps, " ".join(map(str, tokens)), flush=True)
"""


def test_exclusion_across_eight_processes(url: str, tmp_path: Path) -> None:
    counter, marker = tmp_path / "counter", tmp_path / "inside"
    counter.write_text("0")
    procs = [start(INCREMENTER, url, str(counter), str(marker), "200") for _ in range(8)]
    try:
        for proc in procs:
            assert read_line(proc) == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = [read_line(proc, timeout=120).split() for proc in procs]
    finally:
        for proc in procs:
            stop(proc)
    assert counter.read_text() == "1600"
    assert [r[0] for r in reports] == ["0"] * 8, "two processes were inside at once"
    tokens = [int(t) for r in reports for t in r[1:]]
    # Unique and rising, not contiguous: a process that finishes first and closes its kit
    # removes the record if it is free at that moment, and the next grant reseeds above it.
    assert len(set(tokens)) == 1600, "each grant has its own fence"
    for r in reports:
        mine = [int(t) for t in r[1:]]
        assert mine == sorted(mine) and len(mine) == 200, "a process saw its fence go back"


def test_exclusion_across_threads_of_one_process(url: str, tmp_path: Path) -> None:
    kits = [LockKit(url, auto_renew=False), LockKit(url, auto_renew=False)]
    inside = threading.Lock()
    state = {"count": 0, "overlaps": 0}
    errors: list[BaseException] = []

    def work(kit: LockKit) -> None:
        try:
            for _ in range(200):
                with kit.lock("threads", timeout=60):
                    if not inside.acquire(blocking=False):
                        state["overlaps"] += 1
                        continue
                    value = state["count"]
                    time.sleep(0)
                    state["count"] = value + 1
                    inside.release()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(kits[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert state == {"count": 1600, "overlaps": 0}


def test_a_sigkilled_holder_frees_the_key_at_once(kit: LockKit, url: str) -> None:
    proc = start(HOLDER, url, "crash", "30", "1")
    try:
        token = int(read_line(proc).split()[1])
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)  # reaped: its pid is gone, not a zombie
        began = time.monotonic()
        with kit.lock("crash", timeout=5) as held:
            took = time.monotonic() - began
            assert held.token is not None and held.token > token
        assert took < 1.0, f"took {took:.3f} s; the dead holder's TTL was 30 s"
    finally:
        stop(proc)


def test_a_holder_that_exits_normally_hands_its_lease_on(kit: LockKit, url: str) -> None:
    proc = start(HOLDER, url, "handed", "30", "0")
    try:
        token = int(read_line(proc).split()[1])
        info = kit.admin.info("handed")
        assert info is not None
        assert proc.stdin is not None
        proc.stdin.close()  # the holder leaves its loop and exits without releasing
        assert proc.wait(10) == 0
    finally:
        stop(proc)
    assert kit.lock("handed").acquire(blocking=False) is False
    after = kit.admin.info("handed")
    assert after is not None and after.token == token
    assert after.holder == f"{os.uname().nodename} pid {proc.pid} (exited)"
    assert kit.backend.release("handed", "0" * 32) is False
    assert kit.admin.force_release("handed") is True
    with kit.lock("handed", timeout=0) as held:
        assert fence(held) == token + 1


def test_a_sigstopped_holder_is_taken_over_after_its_ttl(kit: LockKit, url: str) -> None:
    proc = start(HOLDER, url, "paused", "1.0", "1")
    try:
        token = int(read_line(proc).split()[1])
        pause_outside_flock(proc)
        began = time.monotonic()
        mine = kit.lock("paused", timeout=5, ttl=30)
        assert mine.acquire()
        took = time.monotonic() - began
        assert 0.2 < took < 2.0, f"took over after {took:.3f} s with a 1 s TTL"
        assert mine.token is not None and mine.token > token
        proc.send_signal(signal.SIGCONT)
        assert ask(proc, "check") == "lost"
        assert ask(proc, "release") == "lost"
        mine.check()
        info = kit.admin.info("paused")
        assert info is not None and info.token == mine.token
        mine.release()
    finally:
        stop(proc)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_cannot_release_the_parents_lock(kit: LockKit) -> None:
    held = kit.lock("forked", ttl=30)
    assert held.acquire()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 10
        try:
            code = 11
            try:
                held.release()
            except LockNotOwned:
                code = 12
                if kit.lock("forked").acquire(blocking=False) is False:
                    code = 13
                    assert kit.backend.try_acquire("own", OWNER_A, 5.0).acquired
                    code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert held.owned()
    held.check()
    info = kit.admin.info("forked")
    assert info is not None and info.token == held.token
    assert info.holder is not None and info.holder.endswith(f"pid {os.getpid()}")
    held.release()
    with pytest.raises(LockNotOwned):
        held.release()
    assert kit.admin.info("forked") is None
    assert kit.admin.info("own") is None  # the child is gone, and so is its lease


def increment(kit: LockKit, counter: Path, marker: Path, rounds: int) -> int:
    overlaps = 0
    for _ in range(rounds):
        with kit.lock("counter", timeout=60):
            try:
                inside = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                overlaps += 1
                continue
            counter.write_text(str(int(counter.read_text()) + 1))
            os.close(inside)
            os.unlink(marker)
    return overlaps


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_children_do_not_share_the_parents_flocks(kit: LockKit, tmp_path: Path) -> None:
    # A flock belongs to the open file description, which a fork shares: children that kept
    # the parent's cached descriptors would all be "inside" together.
    counter, marker = tmp_path / "counter", tmp_path / "inside"
    counter.write_text("0")
    with kit.lock("counter"):
        pass
    children = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                code = min(increment(kit, counter, marker, 200), 1) * 2
            finally:
                os._exit(code)
        children.append(pid)
    overlaps = increment(kit, counter, marker, 200)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    assert codes == [0] * 4, "2: a child was inside with another process"
    assert overlaps == 0
    assert counter.read_text() == "1000"
