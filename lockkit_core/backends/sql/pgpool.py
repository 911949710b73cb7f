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
from psycopg.pq import ExecStatus

from ...errors import BackendError, BackendUnavailable, ConfigError
from .idle import IdleConnections

__all__ = ["MAX_IDLE", "BoundedConnection", "NoAnswer", "PgPool", "translated"]

#: idle connections kept per backend; more are opened under load and closed when returned
MAX_IDLE = 4
#: a pooled connection that fails faster than this was dead before we used it (the server
#: ended it: a restart, ``pg_terminate_backend``); one retry on a fresh one is then safe and
#: cannot stretch the caller's timeout by a network timeout
DEAD_ON_USE = 0.1
TUPLES_OK = ExecStatus.TUPLES_OK


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

    def kept_cursor(self) -> psycopg.Cursor[Any]:
        """One cursor for all of this connection's statements: ``execute()`` on the
        connection makes a new one each time, a tenth of an uncontended lock cycle."""
        if self._kept_cursor is None:
            self._kept_cursor = self.cursor()
        return self._kept_cursor

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


@contextmanager
def translated(what: str, where: str) -> Iterator[None]:
    """Turn psycopg's errors into lockkit's, naming what we were doing and on which server."""
    try:
        yield
    except pg_errors.InsufficientPrivilege as exc:
        raise ConfigError(
            f"PostgreSQL at {where} refused to {what}: {exc}; grant the lock user rights on "
            "the lease table, or have an administrator create it with 'lockkit migrate URL' "
            "(--sql prints the statements)"
        ) from exc
    except psycopg.OperationalError as exc:
        raise BackendUnavailable(f"PostgreSQL at {where} could not {what}: {exc}") from exc
    except psycopg.Error as exc:
        raise BackendError(f"PostgreSQL at {where} failed to {what}: {exc}") from exc


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
        if conn.closed or conn.broken or conn.info.transaction_status != 0:  # 0: IDLE
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
