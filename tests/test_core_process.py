"""lockkit_core.process across a fork, whether Python made it (``os.fork``: its at-fork hooks
run) or C did (libc's ``fork()`` called as an extension or uWSGI would, with no hook run): a
child never hands out its parent's owner tokens (drawn ahead of use), never releases its
parent's lock, and renews its own locks with a thread of its own."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from forking import FORK_PARAMS, FORKS
from forking import in_child as run_in_child

from lockkit_core import LockKit, LockNotOwned, process
from lockkit_core.process import TOKENS_PER_DRAW, new_owner_token

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


@pytest.fixture(params=FORK_PARAMS)
def in_child(request: pytest.FixtureRequest) -> Callable[[Callable[[], Any]], Any]:
    """Run a function in a child made by the fork of the parameter; what it returned."""
    return functools.partial(run_in_child, fork=FORKS[request.param])


def test_a_forked_child_draws_owner_tokens_of_its_own(in_child: Any) -> None:
    new_owner_token()  # the parent now has tokens drawn ahead, which the child inherits
    child = in_child(
        lambda: {
            "tokens": [new_owner_token() for _ in range(TOKENS_PER_DRAW)],
            "pid": process.pid(),
            "os_pid": os.getpid(),
        }
    )
    ours = {new_owner_token() for _ in range(TOKENS_PER_DRAW)}
    assert child["pid"] == child["os_pid"] != process.pid() == os.getpid()
    assert len(set(child["tokens"])) == TOKENS_PER_DRAW
    shared = ours & set(child["tokens"])
    assert not shared, f"the child handed out {len(shared)} of the parent's owner tokens"


def test_a_forked_child_never_releases_its_parents_lock(in_child: Any, tmp_path: Path) -> None:
    with LockKit(f"file://{tmp_path}", namespace="fork", ttl=30) as kit:
        lock = kit.lock("parent-held", auto_renew=False)
        assert lock.acquire(blocking=False)

        def release_in_child() -> str:
            try:
                lock.release()
            except LockNotOwned:
                return "refused"
            return "released"

        answer = in_child(release_in_child)
        try:
            with LockKit(f"file://{tmp_path}", namespace="fork", ttl=30) as other:
                assert not other.lock("parent-held").acquire(blocking=False), (
                    f"the child ({answer}) freed the lock its parent still holds"
                )
            assert answer == "refused"
        finally:
            lock.release()


def test_a_forked_child_renews_its_own_locks(in_child: Any, tmp_path: Path) -> None:
    # The parent's renewal thread is running when the child is made; the child has no such
    # thread, whatever the thread's object (copied with the parent's memory) says.
    with (
        LockKit(f"file://{tmp_path}", namespace="fork", ttl=30) as kit,
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

        assert in_child(hold_past_the_ttl) == "held"


def test_owner_tokens_are_128_bit_hex_and_never_repeat() -> None:
    tokens = [new_owner_token() for _ in range(5 * TOKENS_PER_DRAW)]
    assert len(set(tokens)) == len(tokens)
    assert all(len(token) == 32 and int(token, 16) >= 0 for token in tokens)
