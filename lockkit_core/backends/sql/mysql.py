"""``MySQLBackend``: the lease table on MariaDB (10.5+) or MySQL (8), through PyMySQL.

Acquiring is one short transaction sent in one round trip (see :func:`acquire_sql`): lock
the key's row, and if the key is free, its lease over or ours, write it (bumping the fence
counter for a new holder) and commit. Release and extend are one statement each, comparing
the owner digest. Waiting: one waiter per key backs off and tries, the others queue in the
server (see :mod:`.mywait`); MySQL cannot notify another session. On an event loop the same
statements run on a few threads of the kit and the waiters queue on the loop (:mod:`.myaio`).
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import BackendError, ConfigError
from ...url import LockURL
from ..aio import AsyncOps, Executor, PerLoop
from ..base import Backend, Capability, Grade, Grant, Lease, Waiter, owner_id
from .giveback import GiveBack
from .schema import (
    DEFAULT_TABLE,
    LEASE_TABLE,
    SERVER_OPTIONS,
    check_table,
    lease_from_row,
    mysql_ddl,
)

if TYPE_CHECKING:
    from .myaio import MyOps
    from .mypool import MyPool

__all__ = ["MySQLBackend"]

NOW = "UTC_TIMESTAMP(6)"
#: the server's error number for a table that does not exist
NO_TABLE = 1146
#: server errors that mean "someone else is there": duplicate key, deadlock, and a row lock
#: not granted within innodb_lock_wait_timeout (a locker stopped inside its transaction)
_RACED = {1062, 1205, 1213}


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def acquire_sql(t: str) -> str:
    """One round trip: lock the key's row, decide in user variables whether we may take it
    (no row, a lease that is over, or ours), bump the fence counter for a new holder, write,
    commit, and answer ``(taken, fence, microseconds left)``. A key with no row is inserted
    without ``ON DUPLICATE KEY``: of two lockers inserting at once, the second gets a
    duplicate-key error (the multi-statement stops there and its connection is dropped, so
    the server rolls back), never the first one's lock."""
    return f"""SET @lk_o = NULL, @lk_f = NULL, @lk_left = NULL;
START TRANSACTION;
SELECT owner, fence, TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at) INTO @lk_o, @lk_f, @lk_left
FROM {t} WHERE key_hash = %(hash)s FOR UPDATE;
SET @lk_new = (@lk_o IS NULL OR (@lk_o <> %(owner)s AND @lk_left <= 0));
SET @lk_take = (@lk_new OR @lk_o = %(owner)s);
UPDATE {t}_fence SET value = LAST_INSERT_ID(value + 1) WHERE id = 1 AND @lk_new;
SET @lk_f = IF(@lk_new, LAST_INSERT_ID(), @lk_f);
INSERT INTO {t} (key_hash, `key`, owner, expires_at, ttl, fence, holder, started_at)
SELECT %(hash)s, %(key)s, %(owner)s, {NOW} + INTERVAL %(micros)s MICROSECOND, %(ttl)s, @lk_f,
       %(holder)s, {NOW}
FROM DUAL WHERE @lk_take AND @lk_o IS NULL;
UPDATE {t} SET owner = %(owner)s, expires_at = {NOW} + INTERVAL %(micros)s MICROSECOND,
       ttl = %(ttl)s, holder = %(holder)s, fence = @lk_f,
       started_at = IF(@lk_new, {NOW}, started_at)
WHERE key_hash = %(hash)s AND @lk_take AND @lk_o IS NOT NULL;
COMMIT;
SELECT @lk_take, @lk_f, @lk_left"""


class MySQLBackend(Backend):
    """Leases in a table on one MariaDB or MySQL server; see the module docstring."""

    schemes: ClassVar[tuple[str, ...]] = ("mysql", "mariadb")
    extra: ClassVar[str | None] = "mysql"
    requires: ClassVar[str | None] = "pymysql"
    capabilities: ClassVar[Capability] = LEASE_TABLE | Capability.CROSS_HOST
    grade: ClassVar[Grade] = Grade.SINGLE_NODE
    option_types: ClassVar[Mapping[str, type]] = {**SERVER_OPTIONS, "table": str}

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.check_seconds("connect_timeout", "socket_timeout")
        database = url.path.lstrip("/")
        if not database or "/" in database:
            raise ConfigError(
                f"the path of {url.redacted()} must be one database name "
                "(mysql://user:password@host:3306/dbname)"
            )
        self.table = check_table(self.options.get("table", DEFAULT_TABLE))
        from .mypool import MyPool  # PyMySQL: imported once the registry checked it is there

        socket_timeout = self.options.get("socket_timeout", 10.0)
        self._socket_timeout = socket_timeout
        params = {
            "host": url.host or "127.0.0.1",
            "port": url.port or 3306,
            "user": self.options.get("username"),
            "password": self.options.get("password", ""),
            "database": database,
            "connect_timeout": self.options.get("connect_timeout", 5.0),
            "read_timeout": socket_timeout,
            "write_timeout": socket_timeout,
            "charset": "utf8mb4",
        }
        self._pool: MyPool = MyPool(params, url.redacted())
        self._acquire_sql = acquire_sql(self.table)
        self._giveback = GiveBack(self.release, self._server_thread_alive)
        self._holder = f"{socket.gethostname()} pid "
        self._schema_lock = threading.Lock()
        from .mypool import MAX_IDLE

        # as many threads as the pool keeps connections: more would only open and close some
        self._executor = Executor("lockkit-mysql", threads=MAX_IDLE)
        self._aio: PerLoop[MyOps] = PerLoop()

    # -- statements ------------------------------------------------------------------------------

    def _run(self, sql: str, params: list[Any], what: str) -> list[tuple[int, list[Any]]]:
        try:
            return self._pool.run(sql, params, what)
        except BackendError as exc:
            cause = exc.__cause__
            if not (cause is not None and getattr(cause, "args", (None,))[0] == NO_TABLE):
                raise
        self.create_schema()
        return self._pool.run(sql, params, what)

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        from .mywait import RoomWaiter, waiting_room

        return RoomWaiter(self._pool, waiting_room(self.table, key), self._socket_timeout / 2)

    def aio(self) -> AsyncOps:
        """These statements on the kit's few threads, the waiting on the running loop (one
        set of waiting rooms per loop; see .myaio)."""
        from .myaio import MyOps

        return self._aio.get(lambda: MyOps(self, self._executor))

    def _server_thread_alive(self, thread: int) -> bool:
        done = self._pool.run(
            "SELECT 1 FROM information_schema.processlist WHERE id = %s",
            [thread],
            "look for an abandoned session",
        )
        return bool(done[0][1])

    def ddl(self) -> list[str]:
        return mysql_ddl(self.table)

    def create_schema(self) -> None:
        with self._schema_lock:
            for statement in self.ddl():
                self._pool.run(statement, [], "create the lease table")

    # -- locking ---------------------------------------------------------------------------------

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        try:
            return self._acquire(key, owner, ttl)
        except BackendError as exc:
            cause = exc.__cause__
            if getattr(cause, "args", (None,))[0] != NO_TABLE:
                raise
        self.create_schema()
        return self._acquire(key, owner, ttl)

    def _acquire(self, key: str, owner: str, ttl: float) -> Grant:
        digest, mine = _digest(key), owner_id(owner)
        micros = int(ttl * 1e6)
        params = {
            "hash": digest,
            "key": key.encode("utf-8", "surrogatepass"),
            "owner": mine,
            "micros": micros,
            "ttl": ttl,
            "holder": self._holder + str(os.getpid()),
        }
        try:
            done = self._pool.run(
                self._acquire_sql,
                params,
                f"acquire {key!r}",
                abandoned=lambda thread: self._giveback.add(key, owner, thread, ttl),
            )
        except BackendError as exc:
            code = getattr(exc.__cause__, "args", (None,))[0]
            if code in _RACED:  # another locker inserted the row first, or holds it stopped
                return Grant(False, retry_after=0.0)
            raise
        taken, fence, left_us = done[-1][1][0]
        if taken:
            return Grant(True, int(fence))
        return Grant(False, retry_after=max(0.0, float(left_us) / 1e6))

    def release(self, key: str, owner: str) -> bool:
        where = "WHERE key_hash = %s AND owner = %s"
        params = [_digest(key), owner_id(owner)]
        done = self._run(
            f"DELETE FROM {self.table} {where} AND expires_at > {NOW}", params, f"release {key!r}"
        )
        if done[0][0]:
            return True
        # Ours but over (or not ours): a row whose lease is over would only wait for a
        # take-over; ours goes now.
        self._run(f"DELETE FROM {self.table} {where}", params, f"release {key!r}")
        return False

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        return self.adopt(key, owner, ttl).acquired

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        where = f"WHERE key_hash = %s AND owner = %s AND expires_at > {NOW}"
        digest, mine = _digest(key), owner_id(owner)
        done = self._run(
            f"UPDATE {self.table} SET expires_at = {NOW} + INTERVAL %s MICROSECOND, ttl = %s "
            f"{where}; SELECT fence FROM {self.table} WHERE key_hash = %s AND owner = %s "
            "AND ROW_COUNT() > 0",
            [int(ttl * 1e6), ttl, digest, mine, digest, mine],
            f"extend {key!r}",
        )
        rows = done[1][1]
        return Grant(True, int(rows[0][0])) if done[0][0] and rows else Grant(False)

    # -- admin -----------------------------------------------------------------------------------

    # started_at holds UTC (UTC_TIMESTAMP): counted from the epoch without the session's zone.
    _COLUMNS = (
        f"`key`, owner, fence, TIMESTAMPDIFF(MICROSECOND, {NOW}, expires_at), holder, "
        "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', started_at)"
    )

    @staticmethod
    def _lease(row: tuple[Any, ...]) -> Lease:
        key, owner, fence, left_us, holder, started_us = row
        key = bytes(key).decode("utf-8", "surrogatepass")
        return lease_from_row((key, owner, fence, left_us / 1e6, holder, started_us / 1e6))

    def list(self, prefix: str) -> list[Lease]:
        raw = prefix.encode("utf-8", "surrogatepass")
        done = self._run(
            f"SELECT {self._COLUMNS} FROM {self.table} WHERE LEFT(`key`, %s) = %s "
            f"AND expires_at > {NOW} ORDER BY `key`",
            [len(raw), raw],
            "list locks",
        )
        return [self._lease(row) for row in done[0][1]]

    def info(self, key: str) -> Lease | None:
        done = self._run(
            f"SELECT {self._COLUMNS} FROM {self.table} WHERE key_hash = %s AND expires_at > {NOW}",
            [_digest(key)],
            f"read the lock {key!r}",
        )
        rows = done[0][1]
        return self._lease(rows[0]) if rows else None

    def force_release(self, key: str) -> bool:
        digest = _digest(key)
        done = self._run(
            f"DELETE FROM {self.table} WHERE key_hash = %s AND expires_at > {NOW}; "
            f"DELETE FROM {self.table} WHERE key_hash = %s",
            [digest, digest],
            f"force-release {key!r}",
        )
        return bool(done[0][0])

    # -- lifecycle -------------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        self._pool.forget_after_fork()
        self._giveback = GiveBack(self.release, self._server_thread_alive)
        self._executor.forget_after_fork()
        self._aio = PerLoop()

    def connection(self, what: str) -> Any:
        """A new autocommit PyMySQL connection with this store's settings, for checks outside
        the lock operations (``lockkit doctor``); the caller closes it."""
        return self._pool.connect(what)

    def close(self) -> None:
        self._executor.close()
        self._giveback.close()
        self._pool.close()
