"""Forks for the fork-safety tests: ``os.fork`` (Python runs its at-fork hooks) and libc's
``fork()`` called as a C extension or uWSGI (without ``--py-call-uwsgi-fork-hooks``) would,
with the GIL held and no hook run; :func:`in_child`, which runs a function in a child made by
either; and :func:`run_case`, which runs a test case with either.

Nothing repairs the interpreter in a child forked below Python, so the child inherits the
interpreter state as the parent's other threads left it. A thread that was waiting for the
GIL at that moment stays registered on the GIL's condition variable, and the child's first
hand-over of the GIL then waits for it, a thread the child does not have, for ever (a lockkit
watchdog started just before the fork was enough; any thread that runs Python now and then,
a pytest-xdist worker's or one an earlier test left, can do it), whatever lockkit does. So a
case of libc's fork runs in a fresh interpreter (:func:`fresh.run`) that has no thread but
those the case starts, and forks only once those sleep in waits of their own
(:func:`settle_threads`). The ``os.fork`` cases run here."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fresh
import pytest

__all__ = ["FORK_PARAMS", "LIBC_FORK", "in_child", "run_case", "settle_threads"]

#: libc's fork() called with the GIL held (PyDLL), as a C extension would: no Python hooks run
_c_fork: Callable[[], int] = ctypes.PyDLL(None).fork
_c_fork.restype = ctypes.c_int  # type: ignore[attr-defined]
_FORKS: dict[str, Callable[[], int]] = {"os.fork": os.fork, "libc fork": _c_fork}

#: libc's fork as a test parameter (it needs Linux's /proc: see settle_threads)
LIBC_FORK = pytest.param(
    "libc fork",
    marks=pytest.mark.skipif(
        not os.path.isdir("/proc/self/task"), reason="needs /proc/self/task (Linux)"
    ),
)
#: both forks as test parameters
FORK_PARAMS = [pytest.param("os.fork"), LIBC_FORK]


def run_case(case: Callable[..., Any], fork: str, **kwargs: Any) -> Any:
    """``case(fork=fork, **kwargs)``: in this process for ``os.fork``, in a fresh interpreter
    for libc's fork (see the module docstring); what it returned."""
    if fork == "os.fork":
        return case(fork=fork, **kwargs)
    return fresh.run(case, fork=fork, **kwargs)


#: how long a child may take to answer, on a loaded machine too: past it, it is stuck
CHILD_WITHIN = 60.0


def in_child(work: Callable[[], Any], fork: str, within: float = CHILD_WITHIN) -> Any:
    """Run ``work()`` in a child made by the fork named ``fork``; what it returned (through
    JSON).

    What ``work()`` raised in the child fails the test with the child's traceback; a child that
    exits without answering fails it with its exit status, and one that has not answered
    within ``within`` seconds is killed and fails it, rather than holding the run up."""
    # Garbage earlier tests left in cycles (kits, clients, sessions) is finalized here: in
    # the child a finalizer would act on state whose threads stayed in the parent. (Before
    # the threads settle: a finalizer may wake one.)
    gc.collect()
    if fork != "os.fork":
        if not fresh.inside():
            raise RuntimeError("libc's fork runs only in a fresh interpreter: use run_case()")
        settle_threads()
    read, write = os.pipe()
    pid = _FORKS[fork]()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            try:
                answer = json.dumps({"value": work()})
            except BaseException:
                answer = json.dumps({"error": traceback.format_exc()})
            with os.fdopen(write, "w") as pipe:
                pipe.write(answer)
        finally:
            os._exit(0)
    os.close(write)
    try:
        said = _read_to_end(read, within)
    finally:
        os.close(read)
    if said is None:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    exit_code = os.waitstatus_to_exitcode(status)
    if said is None:
        pytest.fail(f"the child did not answer within {within:g} s (killed)")
    if not said:
        pytest.fail(f"the child exited without answering (exit code {exit_code})")
    answer = json.loads(said)
    if "error" in answer:
        pytest.fail(f"the child raised (exit code {exit_code}):\n{answer['error']}")
    return answer["value"]


def _read_to_end(fd: int, within: float) -> bytes | None:
    """All ``fd`` gives until its end; None if that has not come within ``within`` s."""
    deadline = time.monotonic() + within
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def settle_threads(timeout: float = 10.0) -> None:
    """Return once every other thread of this process sleeps in a wait of its own: none is
    waiting for the GIL, which a fork below Python would leave a child that cannot hand the
    GIL over (see the module docstring).

    A thread waiting for the GIL wakes every switch interval (5 ms) to check it, so over a
    window of ten intervals, while this thread sleeps without the GIL, it either takes the
    GIL and goes on, or is seen awake or with more context switches. A thread whose kernel
    state is "S" (sleeping) at both ends of the window, with the same switch counts, sleeps
    in a wait of its own."""
    window = max(0.05, 10 * sys.getswitchinterval())
    deadline = time.monotonic() + timeout
    before = _sleepers()
    while True:
        time.sleep(window)
        after = _sleepers()
        if after is not None and after == before:
            return
        if time.monotonic() > deadline:
            names = [thread.name for thread in threading.enumerate()]
            raise RuntimeError(f"the threads {names} never all slept for {window:g} s")
        before = after


def _sleepers() -> dict[str, list[str]] | None:
    """The context switch counts of the other threads; None if one of them is not asleep."""
    counts = {}
    for task in fresh.other_threads():
        where = Path("/proc/self/task", task)
        fields = fresh.stat_fields(where)
        if fields is None or fields[0] != "S":  # exited meanwhile, or not asleep
            return None
        try:
            status = (where / "status").read_text()
        except FileNotFoundError:  # it exited meanwhile
            return None
        counts[task] = [line for line in status.splitlines() if "ctxt_switches" in line]
    return counts
