"""Connections to PostgreSQL for one backend: a small pool, and the one place driver errors
are translated into lockkit's (``BackendUnavailable`` / ``BackendError``, the server's words
kept in the message and the original in ``__cause__``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.generators import execute
from psycopg.pq import ConnStatus, ExecStatus, TransactionStatus
from psycopg.pq.abc import PGresult

from ...errors import BackendError, BackendUnavailable, ConfigError
from .idle import IdleConnections

__all__ = ["MAX_IDLE", "BoundedConnection", "NoAnswer", "PgPool", "translate", "translated"]

#: idle connections kept per backend; more are opened under load and closed when returned
MAX_IDLE = 4
#: a pooled connection that fails faster than this was dead before we used it (the server
#: ended it: a restart, ``pg_terminate_backend``); one retry on a fresh one is then safe and
#: cannot stretch the caller's timeout by a network timeout
DEAD_ON_USE = 0.1
TUPLES_OK = ExecStatus.TUPLES_OK
#: plain ints: libpq's statuses as psycopg's ``pgconn`` and ``PGresult`` give them
FATAL_ERROR = int(ExecStatus.FATAL_ERROR)
CONNECTION_OK = int(ConnStatus.OK)
IDLE = int(TransactionStatus.IDLE)


class NoAnswer(psycopg.OperationalError):
    """The server did not answer within the connection's ``io_timeout``."""


class BoundedConnection(psycopg.Connection[Any]):
    """A connection whose every exchange with the server ends within ``io_timeout`` seconds.

    libpq has no socket timeout: a peer that accepts and acknowledges but never answers (a
    black-holed link, a stopped proxy) would hang a call for ever. Waits that psycopg makes
    without a timeout of their own get ``io_timeout``; when it passes, the connection is in
    an unknown state, so it is closed and the call fails with ``OperationalError``."""

    io_timeout: float = 10.0
    #: the server process of a connection given up for want of an answer
    abandoned_pid: int | None = None
    _kept_cursor: psycopg.Cursor[Any] | None = None
    #: names of the statements a backend prepared on this connection's server session
    prepared_names: tuple[bytes, ...] = ()

    def kept_cursor(self) -> psycopg.Cursor[Any]:
        """One cursor for all of this connection's statements: ``execute()`` on the
        connection makes a new one each time, a tenth of an uncontended lock cycle."""
        if self._kept_cursor is None:
            self._kept_cursor = self.cursor()
        return self._kept_cursor

    def answer(self) -> PGresult:
        """The last result of the query just sent on :attr:`pgconn` (``send_query*``), waited
        for within ``io_timeout`` like every exchange; a statement the server refused raises
        psycopg's error for it. For statements that psycopg's cursor would only slow down (it
        adapts parameters and builds a result object per call, more client time than the
        advisory lock cycle's two round trips): the caller holds the connection alone."""
        results: list[PGresult] = self.wait(execute(self.pgconn))
        for result in results:
            if result.status == FATAL_ERROR:
                raise pg_errors.error_from_result(result, encoding=self.info.encoding)
        if not results:  # pragma: no cover - libpq answers every query with a result
            raise psycopg.OperationalError(self.pgconn.get_error_message())
        return results[-1]

    def wait(
        self,
        gen: Any,
        interval: float = 0.1,
        timeout: float | None = None,
    ) -> Any:
        if timeout is not None:  # notifies(timeout=...): its own bound, not an outage
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, self.io_timeout)
        except pg_errors._WaitTimeout as exc:  # psycopg has no public name for it
            self.abandoned_pid = self.pgconn.backend_pid
            self.pgconn.finish()
            raise NoAnswer(f"no answer from the server within {self.io_timeout:g} s") from exc


def translate(exc: psycopg.Error, what: str, where: str) -> Exception:
    """Lockkit's error for psycopg's ``exc``, naming what we were doing and on which server;
    raise it ``from exc``. For hot paths, where :func:`translated` would cost more than the
    statement's own client time: ``except psycopg.Error as exc: raise translate(...)``."""
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return ConfigError(
            f"PostgreSQL at {where} refused to {what}: {exc}; grant the lock user rights on "
            "the lease table, or have an administrator create it with 'lockkit migrate URL' "
            "(--sql prints the statements)"
        )
    if isinstance(exc, psycopg.OperationalError):
        return BackendUnavailable(f"PostgreSQL at {where} could not {what}: {exc}")
    return BackendError(f"PostgreSQL at {where} failed to {what}: {exc}")


@contextmanager
def translated(what: str, where: str) -> Iterator[None]:
    """Turn psycopg's errors into lockkit's (:func:`translate`) in its block."""
    try:
        yield
    except psycopg.Error as exc:
        raise translate(exc, what, where) from exc


class PgPool(IdleConnections[BoundedConnection]):
    """Up to :data:`MAX_IDLE` idle autocommit connections, shared by the backend's threads."""

    def __init__(
        self, conninfo: str, where: str, io_timeout: float, *, prepare: bool = True
    ) -> None:
        self.conninfo = conninfo
        self.where = where
        self.io_timeout = io_timeout
        #: False: never prepare statements on the server (a transaction pooler runs the
        #: next statement on another server session, where the prepared one is unknown)
        self.prepare = prepare
        super().__init__(MAX_IDLE)

    def connect(self, what: str) -> BoundedConnection:
        """A new autocommit connection."""
        with translated(what, self.where):
            conn = BoundedConnection.connect(self.conninfo, autocommit=True)
        conn.io_timeout = self.io_timeout
        if not self.prepare:
            conn.prepare_threshold = None
        return conn

    def take(self, what: str) -> tuple[BoundedConnection, bool]:
        """An idle connection (``False``) or a new one (``True``)."""
        while (conn := self._pop_idle()) is not None:
            if not conn.closed:
                return conn, False
        return self.connect(what), True

    def give(self, conn: BoundedConnection) -> None:
        """Return ``conn`` for reuse, or close it if it is broken or enough are idle."""
        # libpq's own status (``conn.info`` builds an object and an enum per call)
        pgconn = conn.pgconn
        if pgconn.status != CONNECTION_OK or pgconn.transaction_status != IDLE:
            conn.close()
            return
        if not self._keep(conn):
            conn.close()

    def discard(self, conn: BoundedConnection) -> None:
        conn.close()

    def run(
        self,
        sql: str,
        params: dict[str, Any],
        what: str,
        abandoned: Callable[[int], None] | None = None,
    ) -> Sequence[tuple[Any, ...]]:
        """Execute one statement and return its rows (empty for one that returns none).
        ``abandoned(pid)`` is called when the server did not answer in time: the statement
        may still run, on the server process ``pid``."""
        for attempt in range(2):
            conn, fresh = self.take(what)
            started = time.monotonic()
            try:
                with translated(what, self.where):
                    cursor = conn.kept_cursor()
                    cursor.execute(sql, params)
                    # the result's status, not cursor.description: that builds a Column
                    # object per column on every call, a tenth of a cycle's client time
                    result = cursor.pgresult
                    returned = result is not None and result.status == TUPLES_OK
                    rows = cursor.fetchall() if returned else []
            except BackendUnavailable:
                conn.close()
                if abandoned is not None and conn.abandoned_pid is not None:
                    abandoned(conn.abandoned_pid)
                if fresh or attempt or time.monotonic() - started > DEAD_ON_USE:
                    raise
                continue
            except BaseException:
                self.give(conn)
                raise
            self.give(conn)
            return rows
        raise AssertionError("unreachable")  # pragma: no cover
