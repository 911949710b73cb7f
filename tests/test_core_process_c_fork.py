"""lockkit_core.process across a fork made below Python (a C extension calling ``fork()``
without ``PyOS_AfterFork_Child``, as some do): ``os.register_at_fork`` hooks do not run there,
so a cached process id or pre-drawn owner tokens would be the parent's in the child."""

from __future__ import annotations

import ctypes
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lockkit_core import LockKit, LockNotOwned
from lockkit_core.process import TOKENS_PER_DRAW, new_owner_token

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

#: libc's fork() called with the GIL held (PyDLL), as a C extension would: no Python hooks run
_c_fork = ctypes.PyDLL(None).fork
_c_fork.restype = ctypes.c_int


def _in_c_forked_child(work: Callable[[], Any]) -> Any:
    """Run ``work()`` in a child made by libc's fork(); what it returned (JSON)."""
    read, write = os.pipe()
    pid = _c_fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.write(write, json.dumps(work()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        seen = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return seen


def test_a_child_forked_in_c_draws_owner_tokens_of_its_own() -> None:
    new_owner_token()  # tokens drawn ahead, inherited by the child
    child = _in_c_forked_child(lambda: [new_owner_token() for _ in range(TOKENS_PER_DRAW)])
    ours = {new_owner_token() for _ in range(TOKENS_PER_DRAW)}
    shared = ours & set(child)
    assert not shared, f"the child handed out {len(shared)} of the parent's owner tokens"


def test_a_child_forked_in_c_never_releases_its_parents_lock(tmp_path: Path) -> None:
    with LockKit(f"file://{tmp_path}", namespace="cfork", ttl=30) as kit:
        lock = kit.lock("parent-held", auto_renew=False)
        assert lock.acquire(blocking=False)

        def release_in_child() -> str:
            try:
                lock.release()
            except LockNotOwned:
                return "refused"
            return "released"

        answer = _in_c_forked_child(release_in_child)
        try:
            with LockKit(f"file://{tmp_path}", namespace="cfork", ttl=30) as other:
                assert not other.lock("parent-held").acquire(blocking=False), (
                    f"the child ({answer}) freed the lock its parent still holds"
                )
            assert answer == "refused"
        finally:
            lock.release()


def test_a_child_forked_in_c_renews_its_own_locks(tmp_path: Path) -> None:
    # The parent's renewal thread is running when the child is made; the child has no such
    # thread, whatever the thread's object (copied with the parent's memory) says.
    with (
        LockKit(f"file://{tmp_path}", namespace="cfork", ttl=30) as kit,
        kit.lock("parent-held", auto_renew=True),
    ):

        def hold_past_the_ttl() -> str:
            lock = kit.lock("child-held", ttl=0.5, auto_renew=True)
            assert lock.acquire(blocking=False)
            time.sleep(1.5)
            try:
                lock.check()
            except LockNotOwned as exc:
                return f"lost: {exc}"
            lock.release()
            return "held"

        assert _in_c_forked_child(hold_past_the_ttl) == "held"
