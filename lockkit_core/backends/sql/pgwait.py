"""Waiting on PostgreSQL: ``LISTEN`` on the key's channel, woken by the releaser's ``NOTIFY``.

Each blocked caller listens on a connection of its own (taken from the backend's listen pool,
so a process waiting often reuses them) on a channel named for the key's digest: a release
wakes only the waiters of that key, which then try once each; nobody polls. A holder that
crashed sends no notice: the wait is then bounded by the lease left (``Grant.retry_after``).
"""

from __future__ import annotations

from typing import Any

import psycopg

from ...errors import BackendUnavailable
from ..base import Grant, Waiter
from .pgpool import PgPool, translated

__all__ = ["NotifyWaiter"]


class NotifyWaiter(Waiter):
    """``LISTEN`` at creation (before the attempt it precedes), notices read in ``wait()``."""

    def __init__(self, pool: PgPool, name: str) -> None:
        self._pool = pool
        self._name = name
        self._conn: psycopg.Connection[Any] | None = None
        self._conn = self._listen(*pool.take("listen for releases"))

    def _listen(self, conn: psycopg.Connection[Any], fresh: bool) -> psycopg.Connection[Any]:
        """``conn`` listening on our channel. A pooled connection the server ended meanwhile
        is replaced once by a new one (it failed at once: no time of the caller's is spent)."""
        try:
            with translated("listen for releases", self._pool.where):
                conn.execute(f'LISTEN "{self._name}"')
        except BackendUnavailable:
            conn.close()
            if fresh:
                raise
            return self._listen(self._pool.connect("listen for releases"), True)
        except BaseException:
            conn.close()
            raise
        return conn

    def wait(self, timeout: float) -> Grant | None:
        assert self._conn is not None
        try:
            # Notices that came since LISTEN wait in psycopg's backlog and are yielded first.
            with translated("wait for a release", self._pool.where):
                for _ in self._conn.notifies(timeout=max(0.0, timeout), stop_after=1):
                    pass
        except BackendUnavailable:
            # The listening session ended (a server restart, pg_terminate_backend): listen
            # again on a new one and have the caller look, since a release may have come in
            # between. If the server is gone, the new connection says so.
            self._conn.close()
            self._conn = None
            self._conn = self._listen(self._pool.connect("listen for releases"), True)
        return None

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if not reachable:
            conn.close()  # no round trip: the session's LISTEN ends with it
            return
        try:
            with translated("stop listening", self._pool.where):
                conn.execute("UNLISTEN *")
                # drain notices that came meanwhile, so the next user of this connection
                # is not woken by this key's release
                for _ in conn.notifies(timeout=0):
                    pass
        except Exception:  # a broken listen connection is simply dropped
            conn.close()
            return
        self._pool.give(conn)
