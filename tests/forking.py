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
import json
import os
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


def in_child(work: Callable[[], Any], fork: str) -> Any:
    """Run ``work()`` in a child made by the fork named ``fork``; what it returned (through
    JSON). An exception in the child is raised here as an AssertionError with its traceback."""
    if fork != "os.fork":
        if not fresh.inside():
            raise RuntimeError("libc's fork runs only in a fresh interpreter: use run_case()")
        settle_threads()
    read, write = os.pipe()
    pid = _FORKS[fork]()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            try:
                answer = {"returned": work()}
            except BaseException:
                answer = {"raised": traceback.format_exc()}
            os.write(write, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert text, f"the child of {fork} wrote nothing (wait status {status})"
    answer = json.loads(text)
    if "raised" in answer:
        raise AssertionError(f"in the child of {fork}:\n{answer['raised']}")
    return answer["returned"]


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
        try:
            stat, status = (where / "stat").read_text(), (where / "status").read_text()
        except FileNotFoundError:  # it exited meanwhile
            return None
        state = stat.rsplit(")", 1)[1].split()[0]  # the field after the (command name)
        if state != "S":
            return None
        counts[task] = [line for line in status.splitlines() if "ctxt_switches" in line]
    return counts
