"""A child forked below Python (libc's ``fork()``: no at-fork hook runs) whose threads start
before its first acquisition: every thread's first acquisition must find the
:func:`lockkit_core.process.after_fork` work done, not only the thread that happened to run it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from forking import LIBC_FORK, in_child, run_case

from lockkit_core import process
from lockkit_core.process import new_owner_token

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


@pytest.mark.parametrize("fork", [LIBC_FORK])
def test_a_second_thread_waits_for_the_after_fork_work_another_thread_is_doing(
    fork: str,
) -> None:
    run_case(second_thread_waits_for_the_after_fork_work, fork)


def second_thread_waits_for_the_after_fork_work(fork: str) -> None:
    # The parent (a fresh interpreter) has no thread but this one: the child's threads are
    # the only ones the case is about.
    new_owner_token()  # the parent has tokens drawn ahead, which the child inherits

    def two_threads() -> dict[str, Any]:
        running, go_on = threading.Event(), threading.Event()
        done: list[bool] = []

        def slow_reset() -> None:  # stands for the kits' reset (holds, backend, threads)
            running.set()
            go_on.wait(1)
            done.append(True)

        process.after_fork(slow_reset)
        first = threading.Thread(target=new_owner_token)
        first.start()
        assert running.wait(5), "the first thread's acquisition ran no after_fork callback"
        new_owner_token()  # a second thread's first acquisition, while the reset runs
        finished_first = bool(done)
        go_on.set()
        first.join(5)
        return {"reset_done_before_second_went_on": finished_first}

    seen = in_child(two_threads, fork)
    assert seen["reset_done_before_second_went_on"], (
        "check_fork() marks the child as handled before its after_fork callbacks have run: "
        "a second thread's acquisition went on with the parent's state meanwhile"
    )
