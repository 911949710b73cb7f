"""The ``file://`` backend with real processes: exclusion, crashed and stopped holders,
fencing, odd keys, fork safety and the files it leaves behind (its queue of waiters is in
``test_file_queue.py``)."""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from file_processes import OWNER_A, OWNER_B, ask, pause_outside_flock, read_line, start, stop

from lockkit_core import (
    BackendUnavailable,
    Capability,
    ConfigError,
    Grade,
    Lock,
    LockKit,
    LockLost,
    LockNotOwned,
)
from lockkit_core.backends.file import FileBackend, default_directory, file_name
from lockkit_core.registry import create_backend

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="file:// needs fcntl")

# A lock holder steered through stdin: prints "acquired <token>", then answers each command
# ("check", "release", "extend") with ok | lost | notowned.
HOLDER = r"""
import sys
from lockkit_core import LockKit, LockLost, LockNotOwned
url, key, ttl, renew = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
lock = LockKit(url).lock(key, ttl=ttl, auto_renew=renew)
if not lock.acquire(timeout=10):
    sys.exit(3)
print("acquired", lock.token, flush=True)
for line in sys.stdin:
    try:
        getattr(lock, line.strip())()
        print("ok", flush=True)
    except LockLost:
        print("lost", flush=True)
    except LockNotOwned:
        print("notowned", flush=True)
"""

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


def fence(lock: Lock) -> int:
    assert lock.token is not None
    return lock.token


# -- configuration ---------------------------------------------------------------------------


def test_url_names_the_directory_which_is_created_private(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    made = create_backend(f"file://{target}")
    assert isinstance(made, FileBackend)
    assert made.directory == str(target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert made.describe() == f"file://{target}"
    assert made.capabilities == (
        Capability.TTL
        | Capability.FENCING
        | Capability.FAIR
        | Capability.CROSS_PROCESS
        | Capability.LIST
        | Capability.HAND_OFF
        | Capability.NO_LEASE
        | Capability.SHARED
    )
    assert made.grade is Grade.SINGLE_NODE


def test_relative_and_default_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = create_backend("file://rel/locks")
    assert isinstance(relative, FileBackend)
    assert relative.directory == str(tmp_path / "rel" / "locks")
    default = create_backend("file://")
    assert isinstance(default, FileBackend)
    assert default.directory == default_directory()
    assert default.directory.endswith(f"lockkit-{os.getuid()}")


def test_unknown_options_and_unusable_directories_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown option 'colour'"):
        create_backend(f"file://{tmp_path}?colour=blue")
    in_the_way = tmp_path / "plain-file"
    in_the_way.write_text("")
    with pytest.raises(BackendUnavailable, match="plain-file"):
        create_backend(f"file://{in_the_way}")


def test_file_names_are_readable_when_plain_and_hashed_otherwise() -> None:
    assert file_name("order_42") == "k-order_42.lock"
    assert file_name("shop:order:42") == "k-shop:order:42.lock"
    hashed = ["Order_42", ".hidden", "a/b", "x" * 101, "caf\u00e9", "sp ace", "nl\n"]
    names = [file_name(key) for key in hashed]
    assert all(n.startswith("h-") and len(n) == len("h-.lock") + 40 for n in names)
    assert len(set(names)) == len(names)
    assert file_name("x" * 100) == "k-" + "x" * 100 + ".lock"


# -- the record ------------------------------------------------------------------------------


def test_fences_strictly_increase_across_release_force_release_and_processes(
    kit: LockKit, url: str
) -> None:
    tokens: list[int] = []
    for _ in range(3):
        with kit.lock("fenced") as held:
            tokens.append(fence(held))
    lock = kit.lock("fenced")
    assert lock.acquire()
    tokens.append(fence(lock))
    assert kit.admin.force_release("fenced") is True
    with pytest.raises(LockLost):
        lock.release()
    with kit.lock("fenced") as held:
        tokens.append(fence(held))
    for _ in range(2):
        proc = start(HOLDER, url, "fenced", "30", "0")
        try:
            tokens.append(int(read_line(proc).split()[1]))
            assert ask(proc, "release") == "ok"
        finally:
            stop(proc)
    with kit.lock("fenced") as held:
        tokens.append(fence(held))
    assert tokens == sorted(set(tokens)), tokens
    # A new key's first token is at least the wall clock in microseconds (see record removal).
    assert tokens[0] >= 1_700_000_000 * 10**6


def test_release_and_extend_are_compare_and_act(backend: FileBackend) -> None:
    assert backend.release("k", OWNER_A) is False  # no file yet
    assert backend.extend("k", OWNER_A, 1.0) is False
    grant = backend.try_acquire("k", OWNER_A, 5.0)
    assert grant.acquired and grant.token is not None
    first = grant.token
    busy = backend.try_acquire("k", OWNER_B, 5.0)
    assert not busy.acquired and busy.retry_after is not None and 4.0 < busy.retry_after <= 5.0
    again = backend.try_acquire("k", OWNER_A, 5.0)  # a retried request renews, same token
    assert again.acquired and again.token == first
    assert backend.release("k", OWNER_B) is False
    assert backend.extend("k", OWNER_B, 5.0) is False
    assert backend.extend("k", OWNER_A, 0.05) is True
    time.sleep(0.1)
    assert backend.info("k") is None
    assert backend.extend("k", OWNER_A, 5.0) is False  # an expired lease stays lost
    assert backend.info("k") is None
    assert backend.release("k", OWNER_A) is False
    taken = backend.try_acquire("k", OWNER_B, 5.0)
    assert taken.acquired and taken.token == first + 1
    assert backend.release("k", OWNER_B) is True
    assert backend.release("k", OWNER_B) is False


def test_odd_keys_work_and_are_listed_as_given(kit: LockKit, url: str) -> None:
    keys = [
        "caf\u00e9/\u6ce8\u6587:42",
        "a/b/../c",
        "x" * 1000,
        "spaces and\nnewline",
        "\U0001f512" * 300,
        "Order_42",
        "order_42",
    ]
    locks = [kit.lock(key, ttl=30) for key in keys]
    for lock in locks:
        assert lock.acquire(blocking=False)
    listed = kit.admin.list()
    assert [i.key for i in listed] == sorted(keys)
    assert all(i.token is not None and i.token >= 1_700_000_000 * 10**6 for i in listed)
    other = LockKit(url, auto_renew=False)
    for key in keys:
        assert other.lock(key).acquire(blocking=False) is False
        info = other.admin.info(key)
        assert info is not None and info.key == key
        assert info.holder == f"{os.uname().nodename} pid {os.getpid()}"
    assert [i.key for i in kit.admin.list("x")] == ["x" * 1000]
    assert [i.key for i in kit.admin.list("order")] == ["order_42"]
    for lock in locks:
        lock.release()
    assert kit.admin.list() == []


def test_a_record_from_another_boot_is_free(backend: FileBackend) -> None:
    first = backend.try_acquire("rebooted", OWNER_A, 300.0).token
    assert first is not None
    path = Path(backend.directory, file_name("rebooted"))
    boot = backend._store.boot.decode()
    path.write_text(path.read_text().replace(boot, "00000000-0000-0000-0000-000000000000"))
    grant = backend.try_acquire("rebooted", OWNER_B, 5.0)
    assert grant.acquired and grant.token == first + 1


def test_a_corrupt_file_is_reported_not_reset(backend: FileBackend) -> None:
    path = Path(backend.directory, file_name("junk"))
    path.write_text("not a lock record\n")
    with pytest.raises(BackendUnavailable, match=r"k-junk\.lock"):
        backend.try_acquire("junk", OWNER_A, 5.0)
    assert backend.list("") == []


def test_a_deleted_lock_file_is_noticed_by_holders_of_its_descriptor(url: str) -> None:
    first, second = create_backend(url), create_backend(url)
    assert first.try_acquire("cleaned", OWNER_A, 30.0).acquired
    assert isinstance(first, FileBackend)
    os.unlink(os.path.join(first.directory, file_name("cleaned")))  # a temp cleaner
    assert second.try_acquire("cleaned", OWNER_B, 30.0).acquired
    assert first.extend("cleaned", OWNER_A, 30.0) is False
    assert not first.try_acquire("cleaned", OWNER_A, 30.0).acquired


def test_open_descriptors_stay_bounded(backend: FileBackend) -> None:
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for i in range(700):
        assert backend.try_acquire(f"many-{i}", OWNER_A, 30.0).acquired
        assert backend.release(f"many-{i}", OWNER_A)
    assert len(backend._store.slots) <= 512
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) <= before + 512 + 1  # and the fence counter


# -- processes and threads -------------------------------------------------------------------


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
