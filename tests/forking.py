"""Forks for the fork-safety tests: ``os.fork`` (Python runs its at-fork hooks) and libc's
``fork()`` called as a C extension or uWSGI (without ``--py-call-uwsgi-fork-hooks``) would,
with the GIL held and no hook run; and :func:`in_child`, which runs a function in a child."""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Callable
from typing import Any

#: libc's fork() called with the GIL held (PyDLL), as a C extension would: no Python hooks run
c_fork: Callable[[], int] = ctypes.PyDLL(None).fork
c_fork.restype = ctypes.c_int  # type: ignore[attr-defined]
FORKS: dict[str, Callable[[], int]] = {"os.fork": os.fork, "libc fork": c_fork}


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
