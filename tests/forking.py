"""Forks for the fork-safety tests: ``os.fork`` (Python runs its at-fork hooks) and libc's
``fork()`` called as a C extension or uWSGI (without ``--py-call-uwsgi-fork-hooks``) would,
with the GIL held and no hook run; and :func:`in_child`, which runs a function in a child.

A fork below Python copies the interpreter's own state as other threads left it (pytest-xdist's,
those earlier tests left), and a child that then starts threads can deadlock on it, whatever
lockkit does: it happened once in a full run. So those cases run only on demand, with
``LOCKKIT_TEST_HOOKLESS_FORKS=1`` (``pytest -p no:xdist`` over :data:`MODULES`)."""

from __future__ import annotations

import ctypes
import json
import os
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


def in_child(work: Callable[[], Any], fork: Callable[[], int] = c_fork) -> Any:
    """Run ``work()`` in a child made by ``fork``; what it returned (through JSON)."""
    read, write = os.pipe()
    pid = fork()
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
