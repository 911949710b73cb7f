"""What every test server here shares: starting and stopping its process, and ``with``
support."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["Closing", "log_tail", "spawn_logged", "stop_process"]

_C = TypeVar("_C", bound="Closing")


def spawn_logged(
    args: Sequence[str], log_path: Path, cwd: Path, **popen: Any
) -> subprocess.Popen[bytes]:
    """Start a server process in a session of its own, in ``cwd``, with no stdin, its output
    appended to ``log_path``; ``popen`` adds to the ``Popen`` arguments (``env``, ``user``)."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            **popen,
        )


def log_tail(log_path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a server's log, for the error that says it did not start."""
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_process(
    proc: subprocess.Popen[Any], sig: signal.Signals, wait: float, *, paused: bool = False
) -> None:
    """Send ``sig`` (after SIGCONT if the process was ``paused``) and wait ``wait`` seconds for
    it to exit; SIGKILL it if it lingers. A process that already exited is only reaped."""
    if proc.poll() is None:
        if paused:
            proc.send_signal(signal.SIGCONT)
        proc.send_signal(sig)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(wait)


class Closing:
    """``with Server() as server: ...`` calls ``close()`` on the way out."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
