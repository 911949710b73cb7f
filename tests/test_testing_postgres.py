"""The shipped ``PostgresServer``: a cluster of its own, ready when it answers, gone after."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import psycopg
import pytest

from lockkit_core.testing import PostgresServer, free_port
from lockkit_core.testing.postgres import postgres_ready

pytestmark = pytest.mark.postgresql


def _owner(pid: int) -> str:
    uid = int(
        next(
            line
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("Uid:")
        ).split()[1]
    )
    return pwd.getpwuid(uid).pw_name


def test_the_server_answers_queries_and_keeps_off_the_system_socket_dir(
    postgres_server: PostgresServer,
) -> None:
    server = postgres_server
    assert postgres_ready(server.port, server.user)
    with psycopg.connect(
        host=server.host, port=server.port, user=server.user, dbname=server.database
    ) as conn:
        row = conn.execute(
            "SELECT current_setting('unix_socket_directories'), "
            "current_setting('listen_addresses'), current_user"
        ).fetchone()
    assert row == (str(server.dir), "127.0.0.1", server.user)
    assert (server.dir / f".s.PGSQL.{server.port}").exists()
    assert server.pid is not None
    expected = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    assert _owner(server.pid) == expected  # postgres refuses root: it runs unprivileged


def test_close_stops_the_server_and_removes_its_directory() -> None:
    server = PostgresServer()
    port, directory = server.port, server.dir
    assert postgres_ready(port, server.user)
    server.close()
    assert not server.running()
    assert not postgres_ready(port, server.user)
    assert not directory.exists()


def test_nothing_listening_is_not_ready() -> None:
    assert not postgres_ready(free_port(), "lockkit", timeout=0.2)
