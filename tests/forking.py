"""Forks for the fork-safety tests: ``os.fork`` (Python runs its at-fork hooks) and libc's
``fork()`` called as a C extension or uWSGI (without ``--py-call-uwsgi-fork-hooks``) would,
with the GIL held and no hook run; and :func:`in_child`, which runs a function in a child.

A fork below Python copies the interpreter's own state as other threads left it (pytest-xdist's,
those earlier tests left), and a child that then starts threads can deadlock on it, whatever
lockkit does: it happened once in a full run. So those cases run only on demand, with
``LOCKKIT_TEST_HOOKLESS_FORKS=1`` (``pytest -p no:xdist`` over :data:`MODULES`)."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import select
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest

#: libc's fork() called with the GIL held (PyDLL), as a C extension would: no Python hooks run
c_fork: Callable[[], int] = ctypes.PyDLL(None).fork
c_fork.restype = ctypes.c_int  # type: ignore[attr-defined]
FORKS: dict[str, Callable[[], int]] = {"os.fork": os.fork, "libc fork": c_fork}

#: True where the tests of forks below Python are asked for (see the module docstring)
ISOLATED = os.environ.get("LOCKKIT_TEST_HOOKLESS_FORKS") == "1"
#: the modules with tests of forks below Python
MODULES = [
    "tests/test_core_process.py",
    "tests/test_core_process_fork_threads.py",
    "tests/test_memory_c_fork_queue.py",
    "tests/test_postgres_fork_reads.py",
]
#: a test of a fork below Python: only on demand
hookless = pytest.mark.skipif(
    not ISOLATED, reason="a fork below Python: LOCKKIT_TEST_HOOKLESS_FORKS=1 runs it"
)
#: both forks as parameters: os.fork in the suite, libc's on demand
FORK_PARAMS = [
    pytest.param("os.fork", marks=pytest.mark.skipif(ISOLATED, reason="run by the suite")),
    pytest.param("libc fork", marks=hookless),
]


#: how long a child may take to answer, on a loaded machine too: past it, it is stuck
CHILD_WITHIN = 60.0


def in_child(
    work: Callable[[], Any], fork: Callable[[], int] = c_fork, within: float = CHILD_WITHIN
) -> Any:
    """Run ``work()`` in a child made by ``fork``; what it returned (through JSON).

    What ``work()`` raised in the child fails the test with the child's traceback; a child that
    exits without answering fails it with its exit status, and one that has not answered
    within ``within`` seconds is killed and fails it, rather than holding the run up."""
    # Garbage earlier tests left in cycles (kits, clients, sessions) is finalized here: in
    # the child a finalizer would act on state whose threads stayed in the parent.
    gc.collect()
    read, write = os.pipe()
    pid = fork()
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
