"""``file://`` backends dropped without ``close()`` free their descriptors and sockets."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import pytest

from lockkit_core import LockKit
from lockkit_core.backends.file import FileBackend
from lockkit_core.registry import create_backend

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd") or sys.platform == "win32",
    reason="counts descriptors in /proc/self/fd",
)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_dropped_kits_free_their_descriptors(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'locks'}"
    for _ in range(3):  # warm up whatever the interpreter opens once
        LockKit(url, auto_renew=False).lock("warm", timeout=0).acquire()
    gc.collect()
    before = open_fds()
    for i in range(200):
        kit = LockKit(url, auto_renew=False)
        assert kit.lock(f"key-{i}", timeout=0).acquire()
        del kit
    gc.collect()
    assert open_fds() - before <= 2


def test_dropped_backends_free_their_descriptors_and_sockets(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'locks'}"
    holder = create_backend(url)
    gc.collect()
    before = open_fds()
    for i in range(200):
        backend = create_backend(url)
        assert isinstance(backend, FileBackend)
        assert backend.try_acquire(f"key-{i}", "a" * 32, 30.0).acquired
        # A blocking caller queued behind ``holder``: takes a wake-up socket.
        assert holder.try_acquire("busy", "b" * 32, 30.0).acquired
        waiter = backend.waiter("busy", "a" * 32, False)
        assert not backend.try_acquire("busy", "a" * 32, 30.0).acquired
        waiter.close(False)
        assert holder.release("busy", "b" * 32)
        del backend, waiter
    gc.collect()
    assert open_fds() - before <= 2
    holder.close()


def test_close_is_idempotent_and_the_backend_reopens_on_demand(tmp_path: Path) -> None:
    backend = create_backend(f"file://{tmp_path / 'locks'}")
    assert backend.try_acquire("k", "a" * 32, 30.0).acquired
    backend.close()
    backend.close()
    assert backend.release("k", "a" * 32)
    backend.close()
