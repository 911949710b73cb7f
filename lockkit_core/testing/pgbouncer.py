"""``PgBouncerServer``: a real PgBouncer on a free loopback port in front of a test PostgreSQL.

It serves every database of the :class:`~.postgres.PostgresServer` it fronts, to the same
user, trusted without a password, in ``pool_mode`` (``transaction`` by default: each
transaction runs on whichever server connection is free, the mode that breaks session
advisory locks). Like PostgreSQL it refuses to run as root, so under uid 0 it runs as that
server's unprivileged user. Readiness is a real startup handshake through it. Only the
standard library is needed.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .postgres import PostgresServer, postgres_ready
from .process import Closing, die_with_parent_prefix, free_port, spawn_logged, stop_process

__all__ = ["PgBouncerServer", "find_pgbouncer"]

_INSTALL_HINT = (
    "PgBouncer is not installed; run the test command from README.md (it installs it), or "
    "install it yourself with: sudo apt-get install pgbouncer"
)


def find_pgbouncer() -> str:
    """Path of the ``pgbouncer`` executable; a clear ``RuntimeError`` if there is none."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/sbin")
    if not found:
        raise RuntimeError(_INSTALL_HINT)
    return found


class PgBouncerServer(Closing):
    """``with PgBouncerServer(pg) as bouncer: bouncer.url`` (the ``postgres`` database)."""

    def __init__(
        self,
        postgres: PostgresServer,
        *,
        pool_mode: str = "transaction",
        pool_size: int = 4,
        server_reset_query: str | None = None,
        startup_timeout: float = 20.0,
    ) -> None:
        self.binary = find_pgbouncer()
        self.postgres = postgres
        self.pool_mode = pool_mode
        self.host = postgres.host
        self.user = postgres.user
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="lockkit-pgbouncer-"))
        self.log_path = self.dir / "pgbouncer.log"
        (self.dir / "users.txt").write_text(f'"{self.user}" ""\n')
        # options: lockkit sends its statement_timeout as a startup option, which a pooler
        # cannot keep per client; PgBouncer refuses the connection unless told to ignore it.
        # server_reset_query: None keeps PgBouncer's (DISCARD ALL); "" hands server sessions
        # to the next client as the last one left them.
        reset = "" if server_reset_query is None else f"server_reset_query = {server_reset_query}"
        (self.dir / "pgbouncer.ini").write_text(
            f"""[databases]
* = host={postgres.host} port={postgres.port}
[pgbouncer]
listen_addr = {self.host}
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir / "users.txt"}
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 200
ignore_startup_parameters = extra_float_digits,options
logfile = {self.log_path}
pidfile = {self.dir / "pgbouncer.pid"}
{reset}
"""
        )
        run_as = postgres._run_as  # the unprivileged user PostgreSQL runs as (None: not root)
        if run_as is not None:
            for path in (self.dir, *self.dir.iterdir()):
                shutil.chown(path, run_as.pw_uid, run_as.pw_gid)
        self.log_path.touch()
        if run_as is not None:
            shutil.chown(self.log_path, run_as.pw_uid, run_as.pw_gid)
        uid, gid, groups = postgres._ids()
        self._proc: subprocess.Popen[bytes] | None = spawn_logged(
            [*die_with_parent_prefix(), self.binary, str(self.dir / "pgbouncer.ini")],
            self.dir / "stdout.log",
            self.dir,
            user=uid,
            group=gid,
            extra_groups=groups,
        )
        deadline = time.monotonic() + startup_timeout
        while not postgres_ready(self.port, self.user, host=self.host):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                log = self.log_path.read_text(errors="replace")[-2000:]
                self.close()
                raise RuntimeError(f"pgbouncer did not start on port {self.port}:\n{log}")
            time.sleep(0.05)

    def url(self, database: str = "postgres") -> str:
        """``postgresql://user@127.0.0.1:PORT/database`` through the pooler."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def close(self) -> None:
        """Stop PgBouncer (SIGINT: it stops at once) and remove its directory."""
        if self._proc is not None:
            stop_process(self._proc, signal.SIGINT, 10.0)
            self._proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
