"""Start a real multi-process web server for tests: ``Gunicorn`` (WSGI, gthread workers) or
``Uvicorn`` (ASGI, ``--workers N``) on a free loopback port, and talk to it over plain HTTP.

::

    with Uvicorn("djproject.asgi:application", env={"PYTHONPATH": "tests"}, workers=2) as web:
        status, headers, body = http_call(web.port, "POST", "/pay/", b"{}")

The server is started with the running interpreter (``python -m gunicorn`` / ``-m uvicorn``),
logs to a file, is ready once ``health`` answers 200, and is stopped with SIGTERM (then
SIGKILL) by ``close()``. Only the standard library is needed here; the server itself must be
installed in the environment.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .process import Closing
from .servers import free_port

__all__ = ["Gunicorn", "Uvicorn", "WebServer", "http_call", "raw_http"]

_LOOPBACK = "127.0.0.1"


def http_call(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    timeout: float = 60.0,
) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request on a fresh connection: (status, headers in order, body)."""
    conn = http.client.HTTPConnection(_LOOPBACK, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.getheaders(), response.read()
    finally:
        conn.close()


def raw_http(port: int, request: bytes, *, timeout: float = 60.0) -> bytes:
    """Send ``request`` (a whole HTTP/1.1 message with ``Connection: close``) and return
    every byte the server answers until it closes the connection."""
    with socket.create_connection((_LOOPBACK, port), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


class WebServer(Closing):
    """A server process on ``self.port``; see :class:`Gunicorn` and :class:`Uvicorn`."""

    name = "server"

    def __init__(
        self,
        command: list[str],
        port: int,
        env: dict[str, str],
        *,
        health: str = "/health",
        log_dir: str | None = None,
        ready_timeout: float = 60.0,
    ) -> None:
        self.port = port
        self.log = Path(log_dir or tempfile.gettempdir()) / f"{self.name}-{port}.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                command,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # close() signals the server and its workers only
            )
        try:
            self._wait_ready(health, ready_timeout)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, health: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-3000:]}")
            try:
                if http_call(self.port, "GET", health, timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not answer in {timeout:g} s: {self.log.read_text()}")

    def close(self) -> None:
        """SIGTERM the server's process group; SIGKILL it if it is still there after 10 s."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class Gunicorn(WebServer):
    """``gunicorn --workers N --threads T --worker-class gthread APP`` (a WSGI ``module:app``)."""

    name = "gunicorn"

    def __init__(
        self,
        app: str,
        env: dict[str, str],
        *,
        workers: int = 2,
        threads: int = 4,
        log_dir: str | None = None,
    ) -> None:
        port = free_port()
        command = [
            sys.executable, "-m", "gunicorn", "--bind", f"{_LOOPBACK}:{port}",
            "--workers", str(workers), "--threads", str(threads), "--worker-class", "gthread",
            "--log-level", "warning", app,
        ]  # fmt: skip
        super().__init__(command, port, env, log_dir=log_dir)


class Uvicorn(WebServer):
    """``uvicorn --workers N APP`` (an ASGI ``module:app``), each worker its own event loop."""

    name = "uvicorn"

    def __init__(
        self, app: str, env: dict[str, str], *, workers: int = 2, log_dir: str | None = None
    ) -> None:
        port = free_port()
        command = [
            sys.executable, "-m", "uvicorn", "--host", _LOOPBACK, "--port", str(port),
            "--workers", str(workers), "--log-level", "warning", "--no-access-log", app,
        ]  # fmt: skip
        super().__init__(command, port, env, log_dir=log_dir)
