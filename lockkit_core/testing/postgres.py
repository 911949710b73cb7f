"""``PostgresServer``: a throwaway PostgreSQL cluster on a free loopback port, for tests.

``initdb`` writes a new cluster into a temporary directory, ``postgres`` serves it on
127.0.0.1 with its unix socket in that directory (never the system's ``/var/run/postgresql``),
so it neither depends on nor collides with a cluster the distribution's package may run.
Readiness is a real connection: the startup handshake until the server says it is ready for
queries. Durability is off (``fsync``, ``synchronous_commit``): the data is thrown away.

PostgreSQL refuses to run as root, so under uid 0 both programs run as an unprivileged user
(``postgres`` if it exists, else ``nobody``) that owns the directory. Only the standard
library is needed.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import ClassVar

from .process import DatabaseServer, die_with_parent_prefix, free_port, spawn_logged

__all__ = ["PostgresServer", "find_postgres_bin", "postgres_ready"]

_LOOPBACK = "127.0.0.1"
_BIN_DIRS = tuple(f"/usr/lib/postgresql/{v}/bin" for v in (15, 16, 17))
_INSTALL_HINT = (
    "PostgreSQL's initdb/postgres are not installed; run the test command from README.md "
    "(it installs them), or install them yourself with: sudo apt-get install postgresql"
)
_PROTOCOL_3 = 196608


def find_postgres_bin() -> Path:
    """The directory holding ``initdb`` and ``postgres``; a clear ``RuntimeError`` if none."""
    for candidate in (os.environ.get("LOCKKIT_PG_BIN"), *_BIN_DIRS):
        if candidate and os.access(Path(candidate, "postgres"), os.X_OK):
            return Path(candidate)
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise RuntimeError(_INSTALL_HINT)


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    return data


def postgres_ready(
    port: int, user: str, host: str = _LOOPBACK, database: str = "postgres", timeout: float = 1.0
) -> bool:
    """True if the server on ``host:port`` accepts a connection as ``user`` (trust auth) and
    says it is ready for queries; False while it starts, refuses or is not there."""
    params = f"user\0{user}\0database\0{database}\0\0".encode()
    startup = struct.pack("!ii", 8 + len(params), _PROTOCOL_3) + params
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(startup)
            while True:
                kind, size = struct.unpack("!ci", _read_exact(sock, 5))
                body = _read_exact(sock, size - 4)
                if kind == b"E":  # e.g. "the database system is starting up"
                    return False
                if kind == b"R" and struct.unpack("!i", body[:4])[0] != 0:
                    return False  # asks for a password: not the cluster we made
                if kind == b"Z":
                    sock.sendall(b"X" + struct.pack("!i", 4))  # Terminate
                    return True
    except (OSError, ConnectionError, struct.error):
        return False


class PostgresServer(DatabaseServer):
    """A PostgreSQL server of its own: ``with PostgresServer() as pg: pg.port, pg.user``.

    The superuser is ``user`` (default ``lockkit``), trusted without a password from loopback
    and the socket; ``database`` (``postgres``) exists from the start. ``stop()`` shuts it
    down fast; ``close()`` also removes the directory. Start it from a thread that lives as
    long as the server should: on Linux the server is stopped when that thread exits.
    """

    program: ClassVar[str] = "postgres"
    #: SIGINT: PostgreSQL's fast shutdown, which ends sessions
    stop_signal: ClassVar[signal.Signals] = signal.SIGINT

    def __init__(
        self,
        *,
        user: str = "lockkit",
        bin_dir: str | Path | None = None,
        startup_timeout: float = 30.0,
        max_connections: int = 40,
    ) -> None:
        self.bin_dir = Path(bin_dir) if bin_dir is not None else find_postgres_bin()
        self.user = user
        self.database = "postgres"
        self.host = _LOOPBACK
        self.startup_timeout = startup_timeout
        self.max_connections = max_connections
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="lockkit-pg-"))
        self.data_dir = self.dir / "data"
        self.log_path = self.dir / "postgres.log"
        self._run_as = self._unprivileged_user() if os.geteuid() == 0 else None
        if self._run_as is not None:
            os.chown(self.dir, self._run_as.pw_uid, self._run_as.pw_gid)
        try:
            self._initdb()
            self.start()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _unprivileged_user() -> pwd.struct_passwd:
        for name in ("postgres", "nobody"):
            try:
                return pwd.getpwnam(name)
            except KeyError:
                continue
        raise RuntimeError("running as root, and there is no 'postgres' or 'nobody' user to run as")

    def _ids(self) -> tuple[int | None, int | None, list[int] | None]:
        """``Popen``'s user, group and extra_groups: drop root to the unprivileged user (as
        ``setpriv`` would), or keep ours."""
        if self._run_as is None:
            return None, None, None
        return self._run_as.pw_uid, self._run_as.pw_gid, []

    def _initdb(self) -> None:
        args = [
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            self.user,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
        ]
        uid, gid, groups = self._ids()
        done = subprocess.run(
            args,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd=self.dir,
            check=False,
            user=uid,
            group=gid,
            extra_groups=groups,
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")
            raise RuntimeError(f"initdb failed ({done.returncode}):\n{output[-2000:]}")

    def _launch(self) -> subprocess.Popen[bytes]:
        args = [
            *die_with_parent_prefix(),
            str(self.bin_dir / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-k",
            str(self.dir),
            "-c",
            f"listen_addresses={_LOOPBACK}",
            "-c",
            f"max_connections={self.max_connections}",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "shared_buffers=16MB",
        ]
        self.log_path.touch()
        if self._run_as is not None:
            os.chown(self.log_path, self._run_as.pw_uid, self._run_as.pw_gid)
        uid, gid, groups = self._ids()
        return spawn_logged(args, self.log_path, self.dir, user=uid, group=gid, extra_groups=groups)

    def _ready(self, deadline: float) -> bool:
        return postgres_ready(self.port, self.user, database=self.database)

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def url(self) -> str:
        """``postgresql://user@127.0.0.1:PORT/postgres``."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.database}"

    def __repr__(self) -> str:
        state = "running" if self.running() else "stopped"
        return f"<PostgresServer {self.url} {state}>"
