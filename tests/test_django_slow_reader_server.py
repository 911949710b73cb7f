"""A client that reads a streamed response slowly, against tests/djproject under a real
gunicorn (file:// locks): the stream's lock is given up after STREAM_MAX_HOLD, while the
server is still blocked writing to that client."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from web_fixtures import _project_env

from lockkit_core import LockKit
from lockkit_core.testing import Gunicorn


@pytest.mark.timeout(120)
def test_a_slow_reader_does_not_keep_the_stream_lock(tmp_path: Path, djproject_db: Path) -> None:
    lock_url = f"file://{tmp_path}/locks"
    env = _project_env(djproject_db, tmp_path, lock_url, str(tmp_path / "responses"))
    env["DJPROJECT_STREAM_MAX_HOLD"] = "1.5"
    # 64 MB in 64 kB rows: far more than the socket buffers take while the client waits.
    path = "/safe/export/slow/?rows=1000&pad=65536"
    with (
        Gunicorn("djproject.wsgi:application", env, log_dir=str(tmp_path)) as web,
        LockKit(lock_url) as kit,
        socket.create_connection(("127.0.0.1", web.port), timeout=30) as client,
    ):
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        assert client.recv(4096).startswith(b"HTTP/1.1 200 OK")
        started = time.monotonic()
        assert kit.admin.info("export:slow") is not None  # held while the stream is read
        while kit.admin.info("export:slow") is not None:  # the client reads nothing more
            assert time.monotonic() - started < 10, "the slow stream kept its lock"
            time.sleep(0.05)
        held_for = time.monotonic() - started
        # Still streaming: the server is blocked on this client, yet the lock is free.
        assert client.recv(65536)
    assert 1.0 < held_for < 5.0
    log = "".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))
    assert "STREAM_MAX_HOLD" in log
