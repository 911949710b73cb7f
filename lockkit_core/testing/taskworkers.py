"""Real ``manage.py db_worker`` processes (django-tasks-db) for tests: ``TaskWorkers``.

Each worker is a ``python -m django db_worker`` subprocess with a worker id of its own (the
one ``db_worker`` writes into a result's ``worker_ids``), so a test can find the process that
runs a task and kill it (``kill(worker_id)``: SIGKILL, no clean-up) and start a fresh one.
Standard library only: the Django project is named by the environment given.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .process import Closing

__all__ = ["TaskWorkers"]


class TaskWorkers(Closing):
    """``count`` db_worker processes on the project that ``env`` names, logs in ``log_dir``."""

    def __init__(
        self, env: dict[str, str], log_dir: Path, count: int = 2, interval: float = 0.05
    ) -> None:
        self.env = {**os.environ, **env}
        self.log_dir = log_dir
        self.interval = interval
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._made = 0
        for _ in range(count):
            self.start()

    def start(self) -> str:
        """Start one more worker; its worker id."""
        self._made += 1
        worker_id = f"w{self._made}"
        log = open(self.log_dir / f"db_worker-{worker_id}.log", "wb")  # noqa: SIM115
        command = [sys.executable, "-m", "django", "db_worker", "--interval",
                   str(self.interval), "--no-startup-delay", "--no-reload",
                   "--worker-id", worker_id, "-v", "2"]  # fmt: skip
        self.procs[worker_id] = subprocess.Popen(
            command, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        return worker_id

    def kill(self, worker_id: str) -> None:
        """SIGKILL the worker ``worker_id`` (it gets no chance to clean up) and reap it."""
        proc = self.procs.pop(worker_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def log(self, worker_id: str) -> str:
        """What worker ``worker_id`` wrote so far."""
        return (self.log_dir / f"db_worker-{worker_id}.log").read_text(errors="replace")

    def close(self) -> None:
        """Stop every worker (SIGTERM, then SIGKILL after 5 s)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs.clear()
