"""Connections to MariaDB / MySQL for one backend: a small pool of PyMySQL connections, and
the one place driver errors are translated into lockkit's (``BackendUnavailable`` /
``BackendError``, the server's words kept in the message and the original in ``__cause__``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pymysql
from pymysql.constants import CLIENT

# From the module object itself, never through the attribute ``pymysql.err``: a Django project
# that runs PyMySQL as MySQLdb (``pymysql.install_as_MySQLdb()``) imports ``MySQLdb.converters``,
# which loads a second copy of the error module and rebinds ``pymysql.err`` to it, while the
# driver keeps raising the first copy's classes.
from pymysql.err import Error, InterfaceError, MySQLError, OperationalError

from ...errors import BackendError, BackendUnavailable, ConfigError
from .idle import IdleConnections

__all__ = ["MAX_IDLE", "Conn", "MyPool", "Results", "execute", "forget", "translated"]

MAX_IDLE = 4
#: see pgpool.DEAD_ON_USE: a pooled connection that fails this fast was dead before use
DEAD_ON_USE = 0.1
#: server error numbers of a right refused (table, command, database)
_DENIED = {1142, 1044, 1045}
#: a PyMySQL connection (the driver ships no type information)
Conn = Any
#: per statement: its affected row count and its rows
Results = list[tuple[int, list[tuple[Any, ...]]]]


@contextmanager
def translated(what: str, where: str) -> Iterator[None]:
    """Turn PyMySQL's errors into lockkit's, naming what we were doing and on which server."""
    try:
        yield
    except MySQLError as exc:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        if code in _DENIED:
            raise ConfigError(
                f"MySQL at {where} refused to {what}: {exc}; grant the lock user rights on "
                "the lease table, or have an administrator create it with 'lockkit migrate "
                "URL' (--sql prints the statements)"
            ) from exc
        if isinstance(exc, InterfaceError) or (
            isinstance(exc, OperationalError)
            and (code is None or code >= 2000 or code in {1040, 1053, 1927})
        ):
            # a closed connection; client errors (2000+: cannot connect, connection lost),
            # too many connections, server shutdown, connection killed
            raise BackendUnavailable(f"MySQL at {where} could not {what}: {exc}") from exc
        raise BackendError(f"MySQL at {where} failed to {what}: {exc}") from exc


class MyPool(IdleConnections[Conn]):
    """Up to :data:`MAX_IDLE` idle autocommit connections, shared by the backend's threads.
    Sessions run READ COMMITTED (no gap locks between lockers of different keys); times are
    read with ``UTC_TIMESTAMP`` and stored in ``DATETIME``, so the session time zone never
    matters."""

    def __init__(self, params: Mapping[str, Any], where: str) -> None:
        self.params = dict(params)
        self.where = where
        super().__init__(MAX_IDLE)

    def connect(self, what: str) -> Conn:
        with translated(what, self.where):
            return pymysql.connect(
                **self.params,
                autocommit=True,
                client_flag=CLIENT.MULTI_STATEMENTS | CLIENT.FOUND_ROWS,
                # a row lock held by a locker stopped mid-transaction makes the key busy after
                # a second, instead of holding every other locker for a socket timeout
                init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; "
                "SET SESSION innodb_lock_wait_timeout = 1",
            )

    def take(self, what: str) -> tuple[Conn, bool]:
        conn = self._pop_idle()
        return (conn, False) if conn is not None else (self.connect(what), True)

    def give(self, conn: Conn) -> None:
        if not (conn.open and self._keep(conn)):
            forget(conn)

    def discard(self, conn: Conn) -> None:
        forget(conn)

    @contextmanager
    def held(
        self, what: str, abandoned: Callable[[int], None] | None = None
    ) -> Iterator[Callable[[str, Any], Results]]:
        """One connection for several statements (a transaction): ``run(sql, params)``
        executes on it and returns, per statement, its affected row count and rows. On an
        error the connection is closed, so the server rolls back what was left open.
        ``abandoned(thread_id)`` is called when the server did not answer in time: what was
        sent may still run, in the server thread ``thread_id``."""
        conn, fresh = self.take(what)
        used = False

        def run(sql: str, params: Any) -> Results:
            nonlocal conn, fresh, used
            while True:
                started = time.monotonic()
                try:
                    results = execute(conn, sql, params, what, self.where)
                except BackendUnavailable:
                    forget(conn)
                    slow = time.monotonic() - started > DEAD_ON_USE
                    if slow and abandoned is not None:
                        abandoned(conn.thread_id())
                    if fresh or used or slow:
                        raise
                    conn, fresh = self.connect(what), True  # it was dead before we used it
                    continue
                used = True
                return results

        try:
            yield run
        except BaseException:
            forget(conn)
            raise
        self.give(conn)

    def run(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any],
        what: str,
        abandoned: Callable[[int], None] | None = None,
    ) -> Results:
        """Execute ``sql`` (one or more statements) on a connection of the pool."""
        with self.held(what, abandoned) as run:
            return run(sql, params)


def execute(conn: Conn, sql: str, params: Any, what: str, where: str) -> Results:
    """Run ``sql`` on ``conn``: per statement, its affected row count and rows."""
    with translated(what, where), conn.cursor() as cursor:
        cursor.execute(sql, params)
        results = [(cursor.rowcount, list(cursor.fetchall()))]
        while cursor.nextset():
            results.append((cursor.rowcount, list(cursor.fetchall())))
    return results


def forget(conn: Conn) -> None:
    """Close ``conn`` without minding whether it still works."""
    # already closed, or the socket is gone: there is nothing to tell the server
    with contextlib.suppress(Error):
        conn.close()
