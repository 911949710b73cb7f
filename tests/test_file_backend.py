"""The ``file://`` backend with real processes: exclusion, crashed and stopped holders,
fencing, odd keys, fork safety, the files it leaves behind, and its queue of waiters."""

from __future__ import annotations

import itertools
import os
import select
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
from lockkit_core.backends.file import FileBackend, default_directory, file_name, wakeups
from lockkit_core.backends.file import queue as file_queue
from lockkit_core.backends.file.record import owner_hint
from lockkit_core.backends.file.store import peek
from lockkit_core.registry import create_backend

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="file:// needs fcntl")

ROOT = Path(__file__).resolve().parents[1]
OWNER_A = "a" * 32
OWNER_B = "b" * 32
OWNER_C = "c" * 32

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


def start(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def read_line(proc: subprocess.Popen[str], timeout: float = 20.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"process {proc.pid} said nothing for {timeout} s"
    line = proc.stdout.readline()
    assert line, f"process {proc.pid} exited with {proc.wait()}"
    return line.strip()


def ask(proc: subprocess.Popen[str], command: str) -> str:
    assert proc.stdin is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    return read_line(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


def fence(lock: Lock) -> int:
    assert lock.token is not None
    return lock.token


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'locks'}"


@pytest.fixture
def kit(url: str) -> Iterator[LockKit]:
    with LockKit(url, auto_renew=False) as kit:
        yield kit


@pytest.fixture
def backend(url: str) -> Iterator[FileBackend]:
    made = create_backend(url)
    assert isinstance(made, FileBackend)
    yield made
    made.close()


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
        "lone \udcff surrogate",
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
    first = min(tokens)
    assert sorted(tokens) == list(range(first, first + 1600)), "each grant has its own fence"


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
        proc.send_signal(signal.SIGSTOP)
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
    return [owner_hint(line.split(b" ")[0]) for line in record.queue.splitlines()]


def queue_up(url: str, key: str, timeout: str, ttl: str) -> subprocess.Popen[str]:
    """A WAITER process that has joined the queue of ``key``."""
    before = len(queue_of(url, key))
    proc = start(WAITER, url, key, timeout, ttl)
    assert read_line(proc) == "ready"
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    wait_until(lambda: len(queue_of(url, key)) == before + 1)
    return proc


def wait_until(condition: object, timeout: float = 10.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.005)


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
        assert queue_of(url, "k") == [OWNER_B[:8], OWNER_C[:8]]
        assert a.release("k", OWNER_A) is True
        handed = a.info("k")
        assert handed is not None and handed.owner_hint == OWNER_B[:8] and handed.token == first + 1
        waiting_b.close(acquired=False)  # gave up before it noticed
        passed = a.info("k")
        assert passed is not None and passed.owner_hint == OWNER_C[:8] and passed.token == first + 2
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


def test_a_waiter_that_times_out_leaves_no_ghost(kit: LockKit, url: str) -> None:
    held = kit.lock("ghost", ttl=30)
    assert held.acquire()
    procs = []
    try:
        procs.append(early := queue_up(url, "ghost", "0.4", "30"))
        procs.append(late := queue_up(url, "ghost", "10", "30"))
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
    finally:
        for proc in procs:
            stop(proc)


def test_a_killed_waiter_does_not_hold_up_the_queue(kit: LockKit, url: str) -> None:
    held = kit.lock("killed", ttl=30)
    assert held.acquire()
    procs = []
    try:
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
    finally:
        for proc in procs:
            stop(proc)


def test_a_stopped_waiters_entry_lapses(kit: LockKit, url: str) -> None:
    held = kit.lock("stopped", ttl=30)
    assert held.acquire()
    procs = []
    try:
        procs.append(stopped := queue_up(url, "stopped", "10", "0.3"))
        procs.append(patient := queue_up(url, "stopped", "10", "30"))
        stopped.send_signal(signal.SIGSTOP)
        time.sleep(0.7)  # its entry lives twice its 0.3 s lease unless renewed
        held.release()
        assert read_line(patient).split()[0] == "acquired"
        stopped.send_signal(signal.SIGCONT)  # queues again, behind the holder
        wait_until(lambda: len(queue_of(url, "stopped")) == 1)
        assert ask(patient, "release") == "released"
        assert read_line(stopped).split()[0] == "acquired"
        assert ask(stopped, "release") in ("released", "lost")  # its lease is 0.3 s
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
            stop(proc)


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
        assert info is not None and info.owner_hint == OWNER_B[:8]
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
    assert info is not None and info.owner_hint == OWNER_B[:8] and info.token == first + 1
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
    assert queue_of(url, "full") == [OWNER_B[:8]]
    assert late.wait(0.001) is None  # polls, and joins at its next attempt with room
    assert backend.release("full", OWNER_A) is True
    assert not backend.try_acquire("full", OWNER_C, 30.0).acquired
    assert queue_of(url, "full") == [OWNER_C[:8]]
    first.close(acquired=False)  # passes the lock on to the late caller
    info = backend.info("full")
    assert info is not None and info.owner_hint == OWNER_C[:8]
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
    assert queue_of(url, "long") == [owner[:8] for owner in owners]
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
