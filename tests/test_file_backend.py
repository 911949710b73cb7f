"""The ``file://`` backend: its configuration, the record (fencing across releases and
processes, compare-and-act, a record from another boot, a corrupt or deleted file), odd keys
and the files it leaves behind (processes, threads and forks are in
``test_file_processes.py``, its queue of waiters in ``test_file_queue.py``)."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest
from file_processes import (
    HOLDER,
    OWNER_A,
    OWNER_B,
    ask,
    fence,
    read_line,
    start,
    stop,
)

from lockkit_core import (
    BackendUnavailable,
    Capability,
    ConfigError,
    Grade,
    LockKit,
    LockLost,
)
from lockkit_core.backends.file import FileBackend, default_directory, file_name
from lockkit_core.registry import create_backend

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="file:// needs fcntl")


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
