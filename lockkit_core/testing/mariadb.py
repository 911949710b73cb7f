"""``MariaDBServer``: a throwaway MariaDB on a free loopback port, for tests.

``mariadb-install-db`` writes a new data directory into a temporary directory; ``mariadbd``
serves it on 127.0.0.1 with its socket, pid file and temporary files in that directory
(never the system's ``/run/mysqld`` or a shared ``/tmp``), so it neither depends on nor
collides with a server the distribution's package may run, or another test session's. An
init file creates the user ``lockkit`` (no password, from anywhere) with every right, and
the database ``lockkit``. Durability is relaxed (the data is thrown away). Under uid 0 the
server runs as the ``mysql`` user (``--user``), which owns the directory. Readiness is a
real connection that answers. Only the standard library is needed here; the readiness check
uses PyMySQL when it is installed, else the server's greeting.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import ClassVar

from .process import DatabaseServer, die_with_parent_prefix, free_port, spawn_logged

__all__ = ["MariaDBServer", "find_mariadbd"]

_LOOPBACK = "127.0.0.1"
_INSTALL_HINT = (
    "MariaDB is not installed; run the test command from README.md (it installs it), or "
    "install it yourself with: sudo apt-get install mariadb-server"
)
_INIT = """
CREATE USER IF NOT EXISTS 'lockkit'@'%';
GRANT ALL PRIVILEGES ON *.* TO 'lockkit'@'%' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS lockkit;
"""


def find_mariadbd() -> tuple[str, str]:
    """``(mariadbd, mariadb-install-db)``; a clear ``RuntimeError`` if they are missing."""
    server = shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin:/sbin")
    install = shutil.which("mariadb-install-db")
    if not server or not install:
        raise RuntimeError(_INSTALL_HINT)
    return server, install


def _greets(port: int, host: str = _LOOPBACK, timeout: float = 1.0) -> bool:
    """True if the server on ``host:port`` sends its handshake (protocol version 10)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            head = sock.recv(5)
            return len(head) == 5 and head[4] == 10
    except OSError:
        return False


class MariaDBServer(DatabaseServer):
    """A MariaDB server of its own: ``with MariaDBServer() as db: db.url``.

    ``stop()`` shuts it down (SIGTERM, a clean shutdown), ``start()`` starts it again on the
    same data, ``close()`` also removes the directory. Start it from a thread that lives as
    long as the server should: on Linux the server is stopped when that thread exits.
    """

    program: ClassVar[str] = "mariadbd"
    stop_wait: ClassVar[float] = 20.0
    poll_interval: ClassVar[float] = 0.1

    def __init__(self, *, user: str = "lockkit", startup_timeout: float = 60.0) -> None:
        self.server_bin, self.install_bin = find_mariadbd()
        self.user = user
        self.database = "lockkit"
        self.host = _LOOPBACK
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="lockkit-mariadb-"))
        self.data_dir = self.dir / "data"
        self.socket = self.dir / "mariadb.sock"
        self.log_path = self.dir / "mariadb.log"
        self.init_file = self.dir / "init.sql"
        self.init_file.write_text(_INIT.replace("lockkit", user) if user != "lockkit" else _INIT)
        self._run_as = "mysql" if os.geteuid() == 0 else None
        if self._run_as is not None:
            entry = pwd.getpwnam(self._run_as)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
            os.chown(self.init_file, entry.pw_uid, entry.pw_gid)
        try:
            self._install()
            self.start()
        except BaseException:
            self.close()
            raise

    def _user_args(self) -> list[str]:
        return [f"--user={self._run_as}"] if self._run_as is not None else []

    def _install(self) -> None:
        args = [
            self.install_bin,
            "--no-defaults",
            f"--datadir={self.data_dir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            # passed on to the bootstrap server: its temporary tables are named after its
            # pid and thread in tmpdir, so two installs at once in the shared /tmp collided
            f"--tmpdir={self.dir}",
            *self._user_args(),
        ]
        done = subprocess.run(
            args, stdin=subprocess.DEVNULL, capture_output=True, cwd=self.dir, check=False
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")
            raise RuntimeError(f"mariadb-install-db failed ({done.returncode}):\n{output[-2000:]}")

    def _launch(self) -> subprocess.Popen[bytes]:
        args = [
            *die_with_parent_prefix(),
            self.server_bin,
            "--no-defaults",
            f"--datadir={self.data_dir}",
            f"--port={self.port}",
            f"--bind-address={_LOOPBACK}",
            f"--socket={self.socket}",
            f"--pid-file={self.dir / 'mariadb.pid'}",
            f"--init-file={self.init_file}",
            f"--tmpdir={self.dir}",
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
            "--innodb-flush-log-at-trx-commit=2",
            "--max-connections=200",
            *self._user_args(),
        ]
        self.log_path.touch()
        if self._run_as is not None:
            entry = pwd.getpwnam(self._run_as)
            os.chown(self.log_path, entry.pw_uid, entry.pw_gid)
        return spawn_logged(args, self.log_path, self.dir)

    def _ready(self, deadline: float) -> bool:
        return _greets(self.port) and self._answers()

    def _answers(self) -> bool:
        try:
            import pymysql
        except ImportError:
            return True  # the greeting is all we can check
        try:
            conn = pymysql.connect(
                host=self.host, port=self.port, user=self.user, connect_timeout=1
            )
        except pymysql.MySQLError:
            return False  # the init file has not run yet
        conn.close()
        return True

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def url(self) -> str:
        """``mysql://lockkit@127.0.0.1:PORT/lockkit``."""
        return f"mysql://{self.user}@{self.host}:{self.port}/{self.database}"

    def __repr__(self) -> str:
        state = "running" if self.running() else "stopped"
        return f"<MariaDBServer {self.url} {state}>"
