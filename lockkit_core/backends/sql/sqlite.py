"""``SqliteBackend``: the lease table in an SQLite file, for the processes of one host."""

from __future__ import annotations

import os
import random
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from ...errors import BackendError, BackendUnavailable, ConfigError
from ...url import LockURL
from ..aio import AsyncOps, Executor, ExecutorOps
from ..base import Backend, Capability, Grade, Grant, Lease, owner_id
from .schema import DEFAULT_TABLE, LEASE_TABLE, check_table, lease_from_row, sqlite_ddl

__all__ = ["SqliteBackend"]

#: SQLite's clock in seconds since the epoch (``julianday`` has millisecond resolution and
#: works on every SQLite version; ``unixepoch('subsec')`` needs 3.42)
NOW = "((julianday('now') - 2440587.5) * 86400.0)"


class SqliteBackend(Backend):
    """Leases in an SQLite database file; see the package docstring.

    Acquiring is one ``BEGIN IMMEDIATE`` transaction (SQLite's write lock orders attempts):
    read the row and the clock, then write the row and bump the fence counter. Waiting is
    jittered backoff (0.5 ms to 50 ms, bounded by the holder's remaining lease): SQLite
    cannot notify another process.
    """

    schemes: ClassVar[tuple[str, ...]] = ("sqlite",)
    capabilities: ClassVar[Capability] = LEASE_TABLE
    grade: ClassVar[Grade] = Grade.SINGLE_NODE
    option_types: ClassVar[Mapping[str, type]] = {"timeout": float, "table": str}

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self._executor = Executor("lockkit-sqlite")
        self.path = self.file_path(url)
        self.table = check_table(self.options.get("table", DEFAULT_TABLE))
        self.busy_timeout = self.options.get("timeout", 5.0)
        if not self.busy_timeout > 0:
            raise ConfigError("option 'timeout' must be a positive number of seconds")
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._holder = f"{socket.gethostname()} pid "
        self._inherited: list[sqlite3.Connection] = []

    @staticmethod
    def file_path(url: LockURL) -> Path:
        """The database file ``sqlite:///absolute/path.db`` names; a clear error otherwise."""
        if url.host or not url.path.startswith("/") or url.path.endswith("/"):
            raise ConfigError(
                f"{url.redacted()} must name a database file by its absolute path, "
                "with three slashes: sqlite:///var/lib/myapp/locks.db"
            )
        path = Path(url.path)
        if not path.parent.is_dir():
            raise ConfigError(
                f"the directory {str(path.parent)!r} of {url.redacted()} does not exist; "
                "create it, or name a file in a directory that does"
            )
        return path

    # -- the connection ----------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
        )
        # SQLite answers "database is locked" at once, without its busy handler, while another
        # connection turns the file to WAL or recovers its log: several processes opening a
        # new file together see it. Such a set-up is tried again until the busy timeout.
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                # WAL: readers (admin, waiters' looks) do not block the writer or each other.
                conn.execute("PRAGMA journal_mode=WAL")
                for statement in self.ddl():
                    conn.execute(statement)
                return conn
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    conn.close()
                    raise
                time.sleep(0.005 + random.random() * 0.02)

    def ddl(self) -> list[str]:
        return sqlite_ddl(self.table)

    def create_schema(self) -> None:
        with self._session("create the lease table"):
            pass  # opening the connection runs the DDL

    @contextmanager
    def _session(self, what: str) -> Iterator[sqlite3.Connection]:
        """The backend's connection, one thread at a time; SQLite's errors translated."""
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = self._connect()
                yield self._conn
            except sqlite3.OperationalError as exc:
                if self._conn is not None and self._conn.in_transaction:
                    self._conn.rollback()
                raise BackendUnavailable(f"SQLite at {self.path} could not {what}: {exc}") from exc
            except sqlite3.Error as exc:
                raise BackendError(f"SQLite at {self.path} failed to {what}: {exc}") from exc

    def _run(self, sql: str, params: Sequence[Any], what: str) -> list[Any]:
        with self._session(what) as conn:
            return conn.execute(sql, params).fetchall()

    # -- locking ---------------------------------------------------------------------------------

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        t = self.table
        mine = owner_id(owner)
        with self._session(f"acquire {key!r}") as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # the clock and the row (if any) in one read, under the write lock
                now, holder, expires_at, fence, started = conn.execute(
                    "SELECT clock.now, l.owner, l.expires_at, l.fence, l.started_at "
                    f"FROM (SELECT {NOW} AS now) AS clock LEFT JOIN {t} AS l ON l.key = ?",
                    (key,),
                ).fetchone()
                if holder is not None and holder != mine:
                    if expires_at > now:
                        return Grant(False, retry_after=expires_at - now)
                    fence = None  # taking over a lease that is over: a new fence
                if fence is None or holder != mine:
                    started = now  # a new grant (a retried one keeps its start)
                if fence is None:
                    (fence,) = conn.execute(
                        f"UPDATE {t}_fence SET value = value + 1 WHERE id = 1 RETURNING value"
                    ).fetchone()
                conn.execute(
                    f"INSERT OR REPLACE INTO {t} "
                    "(key, owner, expires_at, ttl, fence, holder, started_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (key, mine, now + ttl, ttl, fence, self._holder + str(os.getpid()), started),
                )
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        assert fence is not None
        return Grant(True, int(fence))

    def release(self, key: str, owner: str) -> bool:
        rows = self._run(
            f"DELETE FROM {self.table} WHERE key = ? AND owner = ? RETURNING expires_at > {NOW}",
            (key, owner_id(owner)),
            f"release {key!r}",
        )
        return bool(rows and rows[0][0])

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        return self.adopt(key, owner, ttl).acquired

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        rows = self._run(
            f"UPDATE {self.table} SET expires_at = {NOW} + ?, ttl = ? "
            f"WHERE key = ? AND owner = ? AND expires_at > {NOW} RETURNING fence",
            (ttl, ttl, key, owner_id(owner)),
            f"extend {key!r}",
        )
        return Grant(True, int(rows[0][0])) if rows else Grant(False)

    # -- admin -----------------------------------------------------------------------------------

    _COLUMNS = f"key, owner, fence, expires_at - {NOW}, holder, started_at"

    def list(self, prefix: str) -> list[Lease]:
        rows = self._run(
            f"SELECT {self._COLUMNS} FROM {self.table} "
            f"WHERE substr(key, 1, ?) = ? AND expires_at > {NOW} ORDER BY key",
            (len(prefix), prefix),
            "list locks",
        )
        return [lease_from_row(row) for row in rows]

    def info(self, key: str) -> Lease | None:
        rows = self._run(
            f"SELECT {self._COLUMNS} FROM {self.table} WHERE key = ? AND expires_at > {NOW}",
            (key,),
            f"read the lock {key!r}",
        )
        return lease_from_row(rows[0]) if rows else None

    def force_release(self, key: str) -> bool:
        rows = self._run(
            f"DELETE FROM {self.table} WHERE key = ? RETURNING expires_at > {NOW}",
            (key,),
            f"force-release {key!r}",
        )
        return bool(rows and rows[0][0])

    # -- lifecycle -------------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        self._executor.forget_after_fork()
        # SQLite connections must not cross a fork; the parent's is kept (never closed here)
        # and the child opens its own.
        if self._conn is not None:
            self._inherited.append(self._conn)
        self._conn = None
        self._lock = threading.Lock()

    def aio(self) -> AsyncOps:
        """The blocking statements, run on a few threads of this kit (see ExecutorOps):
        the driver has no asyncio API."""
        return ExecutorOps(self, self._executor)

    def close(self) -> None:
        self._executor.close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
