"""A test case run in a fresh interpreter, for the cases of a fork made below Python
(:mod:`forking`): :func:`run` starts ``python -c "import fresh; fresh.main()"`` with this
process's ``sys.path``, which imports the case's module and calls the case before any thread
exists (no pytest, no pytest-xdist, nothing an earlier test left running), and prints what it
returned as JSON. A case that hangs is killed with its whole process group after ``timeout``
seconds, and its test fails with the tracebacks of every process of the group."""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["TIMEOUT", "inside", "main", "other_threads", "run", "stat_fields"]

#: seconds a case may take, its forked children included
TIMEOUT = 60.0
_cases: list[str] = []  # the case main() runs, once it found no other thread


def run(case: Callable[..., Any], /, timeout: float = TIMEOUT, **kwargs: Any) -> Any:
    """``case(**kwargs)`` in a fresh interpreter: what it returned (through JSON). ``case`` is a
    module-level function of a module on ``sys.path``; ``kwargs`` must be JSON."""
    name = f"{case.__module__}.{case.__qualname__}({', '.join(map(str, kwargs.values()))})"
    spec = json.dumps({"module": case.__module__, "case": case.__qualname__, "kwargs": kwargs})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
    # A session of its own: the forks the case makes join its process group, killed together.
    with subprocess.Popen(
        [sys.executable, "-c", "import fresh; fresh.main()", spec],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            out, err = _kill_group(proc)
            pytest.fail(
                f"{name} gave no answer within {timeout:g} s in its fresh interpreter; its process "
                f"group was killed. It printed (the tracebacks of the group's processes "
                f"last):\n{out}{err}",
                pytrace=False,
            )
        except BaseException:  # interrupted (pytest-timeout, ^C): the case's processes go too
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    if proc.returncode != 0:
        pytest.fail(
            f"{name} failed in its fresh interpreter (exit status {proc.returncode}):\n{out}{err}",
            pytrace=False,
        )
    return json.loads(out.splitlines()[-1])


def _kill_group(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGUSR1 to each process of the group in turn (each writes its threads' tracebacks, see
    :func:`main`), then SIGKILL to the group; what the group printed."""
    members = []
    try:
        members = _group(proc.pid)
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGUSR1)
            time.sleep(0.5)  # written from a signal handler: nothing to wait on; one at a time
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process left the group
        proc.kill()
        out, err = "", "(nothing read: a process outside the group kept the pipes open)"
    return out, f"{err}(the tracebacks are those of the processes {members}, in that order)\n"


def _group(pgid: int) -> list[int]:
    """The processes of process group ``pgid``, the oldest first (Linux's /proc; elsewhere
    only its leader)."""
    members = []
    for entry in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
        fields = stat_fields(Path("/proc", entry))
        if fields is None:  # it exited meanwhile
            continue
        if int(fields[2]) == pgid:
            members.append((int(fields[19]), int(entry)))  # starttime, pid
    return [pid for _, pid in sorted(members)] or [pgid]


def stat_fields(where: Path) -> list[str] | None:
    """The fields of ``where/stat`` (a process's or a thread's, Linux's /proc) after its
    command name, the state first; None if it is gone."""
    try:
        stat = (where / "stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold anything


def inside() -> bool:
    """Whether this is a fresh interpreter of :func:`run`'s, running its case."""
    return bool(_cases)


def other_threads() -> list[str]:
    """The threads of this process besides the calling one, C threads included (Linux's
    /proc; elsewhere the :mod:`threading` ones)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except FileNotFoundError:
        return [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    return [task for task in tasks if int(task) != threading.get_native_id()]


def main() -> None:
    """The fresh interpreter's side of :func:`run`: the case named in ``sys.argv[1]``."""
    # Where run() times out, SIGUSR1 asks for the tracebacks (forked children inherit it);
    # a signal handler rather than dump_traceback_later, which would start a thread.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    spec = json.loads(sys.argv[1])
    case = getattr(importlib.import_module(spec["module"]), spec["case"])
    others = other_threads()
    if others:
        sys.exit(f"the fresh interpreter has other threads before the case: {others}")
    _cases.append(spec["case"])
    print(json.dumps(case(**spec["kwargs"])))
