"""``PostgresBackend``: the lease table on PostgreSQL, one statement per operation."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import BackendError, ConfigError
from ...url import LockURL
from ..base import Backend, Capability, Grade, Grant, Lease, Waiter, owner_id
from .giveback import GiveBack
from .notices import notify_channel
from .schema import (
    DEFAULT_TABLE,
    LEASE_TABLE,
    SERVER_OPTIONS,
    check_table,
    lease_from_row,
    postgres_ddl,
)

if TYPE_CHECKING:
    from ..aio import AsyncOps
    from .pgaio import PgOps
    from .pgpool import PgPool

__all__ = ["PostgresBackend", "postgres_conninfo"]

log = logging.getLogger("lockkit.postgresql")

#: a lock on the DDL so that kits starting together create the table once
_DDL_LOCK = 0x6C6F636B6B6974  # "lockkit"


def postgres_conninfo(url: LockURL, options: Mapping[str, Any]) -> str:
    """The libpq connection string for ``url`` and the parsed ``options``."""
    from psycopg.conninfo import make_conninfo  # the driver is imported only when used

    database = url.path.lstrip("/")
    if "/" in database:
        raise ConfigError(
            f"the path of {url.redacted()} must be one database name "
            "(postgresql://user:password@host:5432/dbname)"
        )
    socket_ms = int(options.get("socket_timeout", 10.0) * 1000)
    params: dict[str, Any] = {
        "host": url.host or "127.0.0.1",
        "port": url.port or 5432,
        "dbname": database or None,
        "user": options.get("username"),
        "password": options.get("password"),
        "connect_timeout": max(1, round(options.get("connect_timeout", 5.0))),
        "sslmode": options.get("sslmode"),
        "application_name": "lockkit",
        # A peer that stops answering fails the call instead of hanging it; a statement
        # stuck behind a row lock for that long is an error too.
        "tcp_user_timeout": socket_ms,
        "keepalives": 1,
        "keepalives_idle": max(1, socket_ms // 2000),
        "keepalives_interval": 1,
        "keepalives_count": 3,
        "options": f"-c statement_timeout={socket_ms}",
    }
    return make_conninfo(**{k: v for k, v in params.items() if v is not None})


class PostgresBackend(Backend):
    """Leases in a table on one PostgreSQL server; see the package docstring."""

    schemes: ClassVar[tuple[str, ...]] = ("postgresql", "postgres")
    extra: ClassVar[str | None] = "postgresql"
    requires: ClassVar[str | None] = "psycopg"
    capabilities: ClassVar[Capability] = LEASE_TABLE | Capability.CROSS_HOST | Capability.NOTIFY
    grade: ClassVar[Grade] = Grade.SINGLE_NODE
    option_types: ClassVar[Mapping[str, type]] = {
        **SERVER_OPTIONS,
        "sslmode": str,
        "table": str,
        "mode": str,
    }

    @classmethod
    def variant(cls, url: LockURL, options: Mapping[str, Any]) -> type[Backend]:
        mode = options.get("mode", url.query.get("mode", "lease"))
        if mode == "advisory":
            from .pgadvisory import PgAdvisoryBackend

            return PgAdvisoryBackend
        if mode != "lease":
            raise ConfigError(
                f"option 'mode' of {url.redacted()} must be 'lease' (the lease table, the "
                f"default) or 'advisory' (PostgreSQL advisory locks), got {mode!r}"
            )
        return cls

    @classmethod
    def variants(cls) -> dict[str, type[Backend]]:
        from .pgadvisory import PgAdvisoryBackend

        return {"?mode=advisory": PgAdvisoryBackend}

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.check_seconds("connect_timeout", "socket_timeout")
        self.table = check_table(self.options.get("table", DEFAULT_TABLE))
        from .pgpool import PgPool  # psycopg: imported once the registry checked it is there

        self._conninfo = postgres_conninfo(url, self.options)
        io_timeout = self.options.get("socket_timeout", 10.0)
        self._pool: PgPool = PgPool(self._conninfo, url.redacted(), io_timeout)
        self._listeners = PgPool(self._conninfo, url.redacted(), io_timeout)
        self._holder = f"{socket.gethostname()} pid "
        self._schema_lock = threading.Lock()
        self._giveback = GiveBack(self.release, self._server_process_alive)
        self._aio: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PgOps] = (
            weakref.WeakKeyDictionary()
        )
        self.conninfo = self._conninfo
        self.io_timeout = io_timeout
        self._statements()

    def _statements(self) -> None:
        t = self.table
        now = "clock_timestamp()"
        until = f"{now} + make_interval(secs => %(ttl)s)"
        # The fence is drawn under a transaction-scoped advisory lock on the key's hash, so
        # two attempts on one key draw in the order they commit: a fence drawn before a
        # competitor's grant-and-release can never be granted after it. A hash collision
        # only orders two unrelated keys' attempts for one statement.
        fence = (
            f"(SELECT nextval('{t}_fence') FROM "
            "(SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))) AS ordered)"
        )
        self._acquire_sql = f"""
WITH taken AS (
    INSERT INTO {t} AS l (key, owner, expires_at, ttl, fence, holder, started_at)
    VALUES (%(key)s, %(owner)s, {until}, %(ttl)s, {fence}, %(holder)s, {now})
    ON CONFLICT (key) DO UPDATE SET
        owner = excluded.owner,
        expires_at = excluded.expires_at,
        ttl = excluded.ttl,
        fence = CASE WHEN l.owner = excluded.owner THEN l.fence ELSE excluded.fence END,
        holder = excluded.holder,
        started_at = CASE WHEN l.owner = excluded.owner
                          THEN l.started_at ELSE excluded.started_at END
    WHERE l.owner = excluded.owner OR l.expires_at <= {now}
    RETURNING fence
)
SELECT fence, NULL::float8 FROM taken
UNION ALL
SELECT NULL, extract(epoch FROM expires_at - {now})::float8 FROM {t}
WHERE key = %(key)s AND NOT EXISTS (SELECT 1 FROM taken)"""
        self._release_sql = f"""
WITH gone AS (
    DELETE FROM {t} WHERE key = %(key)s AND owner = %(owner)s
    RETURNING expires_at > {now} AS live
)
SELECT live, pg_notify(%(channel)s, '') FROM gone"""
        self._extend_sql = f"""
UPDATE {t} SET expires_at = {until}, ttl = %(ttl)s
WHERE key = %(key)s AND owner = %(owner)s AND expires_at > {now}
RETURNING fence"""
        columns = (
            f"key, owner, fence, extract(epoch FROM expires_at - {now})::float8, holder, "
            "extract(epoch FROM started_at)::float8"
        )
        self._info_sql = f"SELECT {columns} FROM {t} WHERE key = %(key)s AND expires_at > {now}"
        self._list_sql = (
            f"SELECT {columns} FROM {t} WHERE key LIKE %(pattern)s AND expires_at > {now} "
            "ORDER BY key"
        )
        self._force_sql = f"""
WITH gone AS (DELETE FROM {t} WHERE key = %(key)s RETURNING expires_at > {now} AS live)
SELECT live, pg_notify(%(channel)s, '') FROM gone"""

    # -- statements ------------------------------------------------------------------------------

    def _run(
        self,
        sql: str,
        params: dict[str, Any],
        what: str,
        abandoned: Callable[[int], None] | None = None,
    ) -> Sequence[tuple[Any, ...]]:
        """One statement; the lease table is created the first time it is found missing."""
        from psycopg import errors as pg_errors

        try:
            return self._pool.run(sql, params, what, abandoned)
        except BackendError as exc:
            if not isinstance(exc.__cause__, pg_errors.UndefinedTable):
                raise
        self.create_schema()
        return self._pool.run(sql, params, what, abandoned)

    def _server_process_alive(self, pid: int) -> bool:
        rows = self._pool.run(
            "SELECT 1 FROM pg_stat_activity WHERE pid = %(pid)s",
            {"pid": pid},
            "look for an abandoned session",
        )
        return bool(rows)

    def ddl(self) -> list[str]:
        return postgres_ddl(self.table)

    def create_schema(self) -> None:
        """Create the lease table and its fence sequence if they do not exist."""
        from .pgpool import translated

        with self._schema_lock:
            conn = self._pool.connect("create the lease table")
            try:
                with translated("create the lease table", self._pool.where), conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                    for statement in postgres_ddl(self.table):
                        conn.execute(statement)
            finally:
                conn.close()
        log.info("created the lock table %s on %s", self.table, self._pool.where)

    # -- locking ---------------------------------------------------------------------------------

    # Each operation is one statement: its text and parameters, and the reading of its rows,
    # are shared by the blocking methods below and the asyncio ones (.pgaio).

    def acquire_statement(self, key: str, owner: str, ttl: float) -> tuple[str, dict[str, Any]]:
        """The acquire statement and its parameters."""
        params = {
            "key": key,
            "owner": owner_id(owner),
            "ttl": ttl,
            "holder": self._holder + str(os.getpid()),
        }
        return self._acquire_sql, params

    @staticmethod
    def acquire_answer(rows: Sequence[tuple[Any, ...]]) -> Grant:
        """The grant the acquire statement's rows say."""
        if not rows:  # the holder released between the two looks: try again soon
            return Grant(False, retry_after=0.0)
        fence, left = rows[0]
        if fence is not None:
            return Grant(True, int(fence))
        return Grant(False, retry_after=max(0.0, float(left)))

    def release_statement(self, key: str, owner: str) -> tuple[str, dict[str, Any]]:
        """The release statement (it notifies the key's waiters) and its parameters."""
        return self._release_sql, {
            "key": key,
            "owner": owner_id(owner),
            "channel": self._channel(key),
        }

    def extend_statement(self, key: str, owner: str, ttl: float) -> tuple[str, dict[str, Any]]:
        """The extend (and adopt) statement and its parameters."""
        return self._extend_sql, {"key": key, "owner": owner_id(owner), "ttl": ttl}

    def abandoned(self, key: str, owner: str, ttl: float) -> Callable[[int], None]:
        """What to do with an acquire whose answer never came from server process ``pid``:
        give its grant back once that process is gone (see .giveback)."""
        return lambda pid: self._giveback.add(key, owner, pid, ttl)

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        sql, params = self.acquire_statement(key, owner, ttl)
        rows = self._run(sql, params, f"acquire {key!r}", self.abandoned(key, owner, ttl))
        return self.acquire_answer(rows)

    def release(self, key: str, owner: str) -> bool:
        rows = self._run(*self.release_statement(key, owner), f"release {key!r}")
        return bool(rows and rows[0][0])

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        return self.adopt(key, owner, ttl).acquired

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        rows = self._run(*self.extend_statement(key, owner, ttl), f"extend {key!r}")
        return Grant(True, int(rows[0][0])) if rows else Grant(False)

    def aio(self) -> AsyncOps:
        """The same statements on ``psycopg.AsyncConnection``s of the running loop (one pool
        per loop); waiters share one listening connection per loop (see .pgaio)."""
        from .pgaio import PgOps

        loop = asyncio.get_running_loop()
        ops = self._aio.get(loop)
        if ops is None:
            ops = self._aio[loop] = PgOps(self)
        return ops

    def channel(self, key: str) -> str:
        """The channel the release of ``key`` notifies."""
        return self._channel(key)

    def _channel(self, key: str) -> str:
        return notify_channel(self.table, key)

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        from .pgwait import NotifyWaiter, waiting_room

        return NotifyWaiter(self._listeners, self._channel(key), waiting_room(self.table, key))

    # -- admin -----------------------------------------------------------------------------------

    def list(self, prefix: str) -> list[Lease]:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._run(self._list_sql, {"pattern": escaped + "%"}, "list locks")
        return [lease_from_row(row) for row in rows]

    def info(self, key: str) -> Lease | None:
        rows = self._run(self._info_sql, {"key": key}, f"read the lock {key!r}")
        return lease_from_row(rows[0]) if rows else None

    def force_release(self, key: str) -> bool:
        params = {"key": key, "channel": self._channel(key)}
        rows = self._run(self._force_sql, params, f"force-release {key!r}")
        return bool(rows and rows[0][0])

    # -- lifecycle -------------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        self._pool.forget_after_fork()
        self._listeners.forget_after_fork()
        self._giveback = GiveBack(self.release, self._server_process_alive)
        self._aio = weakref.WeakKeyDictionary()

    def connection(self, what: str) -> Any:
        """A new autocommit psycopg connection with this store's settings, for checks outside
        the lock operations (``lockkit doctor``); the caller closes it."""
        return self._pool.connect(what)

    def close(self) -> None:
        self._giveback.close()
        self._pool.close()
        self._listeners.close()
