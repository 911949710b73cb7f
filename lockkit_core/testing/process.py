"""What every test server here shares: a free port, starting and stopping its process (and
:class:`ServerProcess`, the start-on-a-free-port, wait-until-ready, stop-by-signal life of one
server process), and ``with`` support."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, TypeVar

__all__ = [
    "Closing",
    "DatabaseServer",
    "ServerProcess",
    "die_with_parent_prefix",
    "free_port",
    "log_tail",
    "spawn_logged",
    "stop_process",
]

_LOOPBACK = "127.0.0.1"


def free_port(host: str = _LOOPBACK) -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def die_with_parent_prefix() -> list[str]:
    """On Linux, run the server under ``setpriv --pdeathsig TERM`` so that a test run killed
    outright (its starting thread gone) does not leave servers behind."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


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


class ServerProcess(Closing):
    """One server process on a loopback port: :meth:`start` launches it (on a new free port
    if the chosen one was taken meanwhile) and waits until it answers; :meth:`stop` ends it
    with :attr:`stop_signal`. A subclass sets ``port``, ``log_path`` and
    ``startup_timeout`` and says how to launch the process and when it is ready."""

    #: the program's name in the error that says it did not start
    program: ClassVar[str]
    #: the signal of a clean shutdown, and how long it may take before SIGKILL
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM
    stop_wait: ClassVar[float] = 10.0
    #: how often readiness is asked while the server starts
    poll_interval: ClassVar[float] = 0.05

    port: int
    log_path: Path
    startup_timeout: float
    _proc: subprocess.Popen[bytes] | None = None
    #: SIGSTOPped: a stop sends SIGCONT first
    _paused: bool = False

    def _launch(self) -> subprocess.Popen[bytes]:
        """Start the process on ``self.port`` (it need not answer yet)."""
        raise NotImplementedError

    def _ready(self, deadline: float) -> bool:
        """True once the server answers; ``deadline`` bounds any set-up done here."""
        raise NotImplementedError

    def _start_attempts(self) -> int:
        """How many ports to try (a server pinned to one port tries once)."""
        return 5

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        """True while the server process is alive (paused counts as alive)."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the server (on a new free port if the chosen one was taken meanwhile)."""
        if self.running():
            return
        for attempt in range(self._start_attempts()):
            if attempt:
                self.port = free_port()
            if self._spawn():
                return
        raise RuntimeError(
            f"{self.program} did not start on port {self.port}; its log says:\n"
            f"{log_tail(self.log_path)}"
        )

    def _spawn(self) -> bool:
        self._proc = self._launch()
        self._paused = False
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:  # it exited: the port was taken, or it failed
                self._proc = None
                return False
            if self._ready(deadline):
                return True
            time.sleep(self.poll_interval)
        self._terminate(signal.SIGKILL)
        return False

    def _terminate(self, sig: signal.Signals, wait: float | None = None) -> None:
        proc = self._proc
        if proc is None:
            return
        stop_process(proc, sig, self.stop_wait if wait is None else wait, paused=self._paused)
        self._proc = None
        self._paused = False

    def stop(self) -> None:
        """Shut the server down cleanly (SIGKILL if it lingers)."""
        self._terminate(self.stop_signal)


class DatabaseServer(ServerProcess):
    """A database server a test connects to as ``user`` (no password) on ``host:port``."""

    host: str
    user: str
    #: the database that exists from the start
    database: str

    def settings(self, name: str | None = None) -> dict[str, str]:
        """Connection settings in Django's ``DATABASES`` spelling (``NAME`` defaults to
        ``database``)."""
        return {
            "HOST": self.host,
            "PORT": str(self.port),
            "USER": self.user,
            "PASSWORD": "",
            "NAME": name or self.database,
        }
