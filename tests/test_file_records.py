"""``file://`` records: a free key leaves no file, and fencing tokens never go back when
record files are removed, by lockkit itself or by a temp cleaner."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lockkit_core import LockKit
from lockkit_core.backends.base import owner_hint
from lockkit_core.backends.file import FileBackend, file_name
from lockkit_core.backends.file.record import FREE, encode
from lockkit_core.registry import create_backend

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="file:// needs fcntl")

ROOT = Path(__file__).resolve().parents[1]
OWNER_A = "a" * 32
OWNER_B = "b" * 32


def records(directory: str) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".lock"))


def cycle(backend: FileBackend, key: str, owner: str, times: int = 1) -> int:
    """Acquire and release ``key`` ``times`` times; the last token."""
    token = 0
    for _ in range(times):
        grant = backend.try_acquire(key, owner, 30.0)
        assert grant.acquired and grant.token is not None
        token = grant.token
        assert backend.release(key, owner)
    return token


# -- fences ----------------------------------------------------------------------------------


def test_a_record_removed_by_a_temp_cleaner_does_not_restart_its_tokens(
    backend: FileBackend,
) -> None:
    last = cycle(backend, "cleaned", OWNER_A, 5)
    os.unlink(os.path.join(backend.directory, file_name("cleaned")))
    grant = backend.try_acquire("cleaned", OWNER_B, 30.0)
    assert grant.acquired and grant.token is not None and grant.token > last


def test_tokens_stay_above_earlier_ones_when_every_file_is_removed(
    backend: FileBackend, url: str
) -> None:
    last = cycle(backend, "wiped", OWNER_A, 5)
    backend.close()
    other = create_backend(url)
    assert cycle(other, "other", OWNER_A) > 0
    other.close()
    for name in os.listdir(backend.directory):  # records and the fence counter alike
        os.unlink(os.path.join(backend.directory, name))
    again = create_backend(url)
    try:
        grant = again.try_acquire("wiped", OWNER_B, 30.0)
        assert grant.acquired and grant.token is not None and grant.token > last
    finally:
        again.close()


def test_a_record_lockkit_removes_leaves_its_fence_in_the_directory_counter(
    backend: FileBackend, url: str
) -> None:
    # A record whose fence is far above the clock's reading (as after the clock stepped
    # back): once lockkit removes the free record, only the counter remembers the fence.
    ahead = int(time.time() * 1e6) + 10**12
    path = os.path.join(backend.directory, file_name("ahead"))
    tail = b"%d 0 %s %s" % (os.getpid(), backend._store.boot, backend._store.host)
    with open(path, "wb") as f:
        f.write(encode(ahead, FREE, 0.0, 0.0, tail, b"ahead", b""))
    assert cycle(backend, "ahead", OWNER_A) == ahead + 1
    backend.close()  # removes the free record
    assert records(backend.directory) == []
    again = create_backend(url)
    try:
        grant = again.try_acquire("ahead", OWNER_B, 30.0)
        assert grant.acquired and grant.token is not None and grant.token > ahead + 1
    finally:
        again.close()


# -- free keys cost nothing ------------------------------------------------------------------


def test_ten_thousand_keys_locked_and_unlocked_leave_no_files(url: str) -> None:
    kit = LockKit(url, auto_renew=False)
    directory = url[len("file://") :]
    for i in range(10_000):
        with kit.lock(f"key-{i}", timeout=0):
            pass
    kit.close()
    assert records(directory) == []


def test_free_records_are_removed_while_the_process_goes_on(
    backend: FileBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lockkit_core.backends.file import store as module

    monkeypatch.setattr(module, "IDLE_SECONDS", 0.2)
    for i in range(300):
        cycle(backend, f"key-{i}", OWNER_A)
    assert backend.try_acquire("held", OWNER_B, 30.0).acquired
    deadline = time.monotonic() + 10.0
    left = {file_name("held"), file_name("busy")}  # "busy" was freed just now
    while not set(records(backend.directory)) <= left and time.monotonic() < deadline:
        time.sleep(0.25)
        cycle(backend, "busy", OWNER_A)
    assert set(records(backend.directory)) <= left
    assert file_name("held") in records(backend.directory)


def test_free_records_beyond_a_bound_are_removed_at_once(
    backend: FileBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lockkit_core.backends.file import store as module

    monkeypatch.setattr(module, "IDLE_MAX", 50)
    for i in range(300):
        cycle(backend, f"key-{i}", OWNER_A)
    assert 50 <= len(records(backend.directory)) <= 51


def test_a_record_with_waiters_or_a_holder_is_never_removed(backend: FileBackend) -> None:
    assert backend.try_acquire("held", OWNER_A, 30.0).acquired
    waiter = backend.waiter("queued", OWNER_B, True)
    try:
        assert backend.try_acquire("queued", OWNER_A, 30.0).acquired
        assert not backend.try_acquire("queued", OWNER_B, 30.0).acquired  # joins the queue
        assert backend.release("queued", OWNER_A)  # handed to OWNER_B
        backend.close()
        assert records(backend.directory) == sorted([file_name("held"), file_name("queued")])
        info = backend.info("queued")
        assert info is not None and info.owner_hint == owner_hint(OWNER_B)
    finally:
        waiter.close(True)


# Increments one of a few counter files N times under its key's lock, with free records
# removed as soon as they are free; an O_EXCL marker per key catches two processes inside.
CHURNER = r"""
import os, sys
from lockkit_core import LockKit
from lockkit_core.backends.file import file_name
from lockkit_core.backends.file import store as module
from lockkit_core.keys import namespaced
module.IDLE_SECONDS = 0.0
url, where, rounds, keys = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
kit = LockKit(url, auto_renew=False)
directory = url[len("file://"):]
tokens = []
overlaps = 0
removed = 0
print("ready", flush=True)
sys.stdin.readline()
for i in range(rounds):
    key = f"churn-{(i * 7 + os.getpid()) % keys}"
    blocking = i % 3 != 0
    lock = kit.lock(key, timeout=60 if blocking else 0)
    if not lock.acquire():
        continue
    try:
        tokens.append(f"{key}={lock.token}")
        try:
            inside = os.open(os.path.join(where, key + ".in"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            overlaps += 1
            inside = -1
        counter = os.path.join(where, key)
        with open(counter, "r+") as f:
            value = int(f.read())
            f.seek(0)
            f.write(str(value + 1))
            f.truncate()
        if inside >= 0:
            os.close(inside)
            os.unlink(os.path.join(where, key + ".in"))
    finally:
        lock.release()
    stored = namespaced(kit.namespace, key)
    removed += not os.path.exists(os.path.join(directory, file_name(stored)))
print(overlaps, removed, len(tokens), " ".join(tokens), flush=True)
"""


def test_exclusion_holds_while_free_records_are_removed_and_recreated(
    url: str, tmp_path: Path
) -> None:
    keys, rounds, procs_n = 3, 400, 8
    where = tmp_path / "counters"
    where.mkdir()
    for k in range(keys):
        (where / f"churn-{k}").write_text("0")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHURNER, url, str(where), str(rounds), str(keys)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(procs_n)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for proc in procs:
            out, _ = proc.communicate(timeout=240)
            assert proc.returncode == 0
            results.append(out.split())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert all(int(r[0]) == 0 for r in results), "two processes inside one key at once"
    assert sum(int(r[1]) for r in results) > rounds, "records were removed and recreated"
    held = sum(int(r[2]) for r in results)
    total = sum(int((where / f"churn-{k}").read_text()) for k in range(keys))
    assert total == held and held >= procs_n * rounds * 2 // 3
    per_key: dict[str, list[int]] = {}
    for r in results:
        for item in r[3:]:
            key, token = item.split("=")
            per_key.setdefault(key, []).append(int(token))
    for key, tokens in per_key.items():
        assert len(tokens) == len(set(tokens)), f"{key}: a token was granted twice"
    assert records(url[len("file://") :]) == []  # every process removed what it freed


# Takes the flock of a file and keeps it, as a process stopped inside its critical section
# would; prints "locked".
FLOCKER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


def test_a_stuck_idle_record_does_not_hold_up_an_unrelated_release(
    backend: FileBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lockkit_core.backends.file import store as module

    monkeypatch.setattr(module, "IDLE_SECONDS", 0.3)
    assert backend.try_acquire("other", OWNER_A, 30.0).acquired
    cycle(backend, "idle", OWNER_A)  # free: due for removal 0.3 s from now
    path = os.path.join(backend.directory, file_name("idle"))
    stuck = subprocess.Popen(
        [sys.executable, "-c", FLOCKER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert stuck.stdout is not None and stuck.stdout.readline().strip() == b"locked"
        time.sleep(0.4)
        began = time.monotonic()
        assert backend.release("other", OWNER_A) is True
        assert time.monotonic() - began < 1.0, "the release waited for the stuck record"
    finally:
        stuck.kill()
        stuck.wait()
    assert file_name("idle") in records(backend.directory)  # left for a later sweep
