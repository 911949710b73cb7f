"""lockkit_core.process across a fork, whether Python made it (``os.fork``: its at-fork hooks
run) or C did (libc's ``fork()`` called as an extension or uWSGI would, with no hook run): a
child never hands out its parent's owner tokens (drawn ahead of use), never releases its
parent's lock, and renews its own locks with a thread of its own."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from forking import FORK_PARAMS, in_child, run_case

from lockkit_core import LockKit, LockNotOwned, process
from lockkit_core.process import TOKENS_PER_DRAW, new_owner_token

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


@pytest.mark.parametrize("fork", FORK_PARAMS)
def test_a_forked_child_draws_owner_tokens_of_its_own(fork: str) -> None:
    run_case(draws_owner_tokens_of_its_own, fork)


@pytest.mark.parametrize("fork", FORK_PARAMS)
def test_a_forked_child_never_releases_its_parents_lock(fork: str, tmp_path: Path) -> None:
    run_case(never_releases_its_parents_lock, fork, directory=str(tmp_path))


@pytest.mark.parametrize("fork", FORK_PARAMS)
def test_a_forked_child_renews_its_own_locks(fork: str, tmp_path: Path) -> None:
    run_case(renews_its_own_locks, fork, directory=str(tmp_path))


def draws_owner_tokens_of_its_own(fork: str) -> None:
    new_owner_token()  # the parent now has tokens drawn ahead, which the child inherits
    child = in_child(
        lambda: {
            "tokens": [new_owner_token() for _ in range(TOKENS_PER_DRAW)],
            "pid": process.pid(),
            "os_pid": os.getpid(),
        },
        fork,
    )
    ours = {new_owner_token() for _ in range(TOKENS_PER_DRAW)}
    pids = {"child": child["pid"], "child's os": child["os_pid"], "parent": process.pid()}
    assert child["pid"] == child["os_pid"] != process.pid() == os.getpid(), pids
    assert len(set(child["tokens"])) == TOKENS_PER_DRAW, "the child repeated owner tokens"
    shared = ours & set(child["tokens"])
    assert not shared, f"the child handed out {len(shared)} of the parent's owner tokens"


def never_releases_its_parents_lock(fork: str, directory: str) -> None:
    with LockKit(f"file://{directory}", namespace="fork", ttl=30) as kit:
        lock = kit.lock("parent-held", auto_renew=False)
        assert lock.acquire(blocking=False)

        def release_in_child() -> str:
            try:
                lock.release()
            except LockNotOwned:
                return "refused"
            return "released"

        answer = in_child(release_in_child, fork)
        try:
            with LockKit(f"file://{directory}", namespace="fork", ttl=30) as other:
                assert not other.lock("parent-held").acquire(blocking=False), (
                    f"the child ({answer}) freed the lock its parent still holds"
                )
            assert answer == "refused", f"the child's release of its parent's lock: {answer}"
        finally:
            lock.release()


def renews_its_own_locks(fork: str, directory: str) -> None:
    # The parent's renewal thread is running when the child is made (the one thread besides
    # the main one in a fresh interpreter); the child has no such thread, whatever the thread's
    # object (copied with the parent's memory) says.
    with (
        LockKit(f"file://{directory}", namespace="fork", ttl=30) as kit,
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

        kept = in_child(hold_past_the_ttl, fork)
        assert kept == "held", f"the child's lock was not renewed past its ttl: {kept}"


def test_owner_tokens_are_128_bit_hex_and_never_repeat() -> None:
    tokens = [new_owner_token() for _ in range(5 * TOKENS_PER_DRAW)]
    assert len(set(tokens)) == len(tokens)
    assert all(len(token) == 32 and int(token, 16) >= 0 for token in tokens)
