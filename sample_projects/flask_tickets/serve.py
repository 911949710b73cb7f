"""Start flask_tickets under gunicorn (gthread workers) on a free loopback port."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

HERE = Path(__file__).resolve().parent


def request(
    port: int, method: str, path: str, body: str = "", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """One request on a fresh connection: (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body.encode(), headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def concurrently(
    port: int, calls: list[tuple[str, str, str]], *, clients: int = 16
) -> list[tuple[int, bytes]]:
    """Send ``(method, path, body)`` calls from ``clients`` threads at once."""
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(lambda c: request(port, c[0], c[1], c[2], form), calls))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Gunicorn:
    """``with Gunicorn(env) as server: server.port`` serves ``app:create_app()``.

    With ``preload`` the app (and its lock kit) is created once in the arbiter and forked
    into the workers, as many deployments do to save memory.
    """

    def __init__(
        self,
        env: dict[str, str],
        *,
        workers: int = 2,
        threads: int = 4,
        app: str = "app:create_app()",
        preload: bool = False,
    ) -> None:
        self.port = free_port()
        self.log = Path(env.get("TICKETS_DATA_DIR", "/tmp")) / f"gunicorn-{self.port}.log"
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "--chdir",
            str(HERE),
            "--bind",
            f"127.0.0.1:{self.port}",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--worker-class",
            "gthread",
            "--log-level",
            "warning",
            *(["--preload"] if preload else []),
            app,
        ]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                command, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
            )
        self._wait_ready(workers)

    def _wait_ready(self, workers: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited: {self.log.read_text()[-2000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return  # workers share the socket: the others take requests once booted
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"gunicorn did not answer in {timeout:g} s: {self.log.read_text()}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Gunicorn:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
