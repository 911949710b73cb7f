"""Waiting on PostgreSQL: one waiter per key listens for the release, the others queue
server-side behind it, so a release wakes one process and nobody polls.

Each blocked caller has a connection of its own (from the backend's listen pool). It
``LISTEN``s on the key's channel (which release and force_release ``NOTIFY``) and takes its
place in the key's *waiting room*: a session advisory lock on a 64-bit digest of the key.
The room's holder is the head waiter: it waits for the notice and tries the lock when it
comes. The others block in ``pg_advisory_lock`` on the server, in arrival order, without
sending anything, until the head leaves (it got the lock, gave up, or its process died: the
server ends its session and the room passes on). A release then costs one notice and one
attempt, however many wait. The room only orders waiters: who holds the lock is decided by
the lease table alone, so a digest collision between two keys delays, never excludes.

A crashed holder sends no notice: every wait is bounded by the lease left
(``Grant.retry_after``), after which waiters look again.
"""

from __future__ import annotations

import hashlib

from psycopg import errors as pg_errors

from ...errors import BackendUnavailable
from ..base import Grant, Waiter
from .pgpool import BoundedConnection, NoAnswer, PgPool, translated

__all__ = ["NotifyWaiter", "waiting_room"]

#: what a queued waiter's statements may take beyond its wait, before the server cancels it
STATEMENT_MARGIN_MS = 2000


def waiting_room(table: str, key: str) -> int:
    """The advisory lock id of ``key``'s waiting room (signed 64 bits)."""
    data = f"lockkit-room\0{table}\0{key}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha1(data).digest()[:8], "big", signed=True)  # noqa: S324


class NotifyWaiter(Waiter):
    """``LISTEN`` and a look at the room at creation (before the attempt it precedes, in one
    round trip); in ``wait()``, queue for the room or, at the head, wait for the notice."""

    def __init__(self, pool: PgPool, name: str, room: int) -> None:
        self._pool = pool
        self._name = name
        self._room = room
        self._head = False
        self._conn: BoundedConnection | None = None
        self._conn = self._listen(*pool.take("listen for releases"))

    def _listen(self, conn: BoundedConnection, fresh: bool) -> BoundedConnection:
        """``conn`` listening on our channel, with the room taken if it was free. A pooled
        connection the server ended meanwhile is replaced once by a new one (it failed at
        once: no time of the caller's is spent)."""
        try:
            with translated("listen for releases", self._pool.where):
                # no parameters: one simple-protocol round trip for both statements
                cursor = conn.execute(
                    f'LISTEN "{self._name}"; SELECT pg_try_advisory_lock({self._room:d})'
                )
                cursor.nextset()
                row = cursor.fetchone()
        except BackendUnavailable:
            conn.close()
            if fresh:
                raise
            return self._listen(self._pool.connect("listen for releases"), True)
        except BaseException:
            conn.close()
            raise
        self._head = bool(row and row[0])
        return conn

    def wait(self, timeout: float) -> Grant | None:
        assert self._conn is not None
        try:
            if not self._head:
                self._queue(timeout)
                return None  # at the head now (the key may be free), or the time is up
            # Notices that came since LISTEN wait in psycopg's backlog and are yielded first.
            with translated("wait for a release", self._pool.where):
                notices = list(self._conn.notifies(timeout=max(0.0, timeout), stop_after=1))
                if not notices:
                    # Silence proves nothing on a link that went dark: ask, so a caller
                    # whose time is up hears BackendUnavailable rather than "busy".
                    self._conn.execute("SELECT 1")
        except BackendUnavailable as exc:
            if isinstance(exc.__cause__, NoAnswer):
                raise  # a dark link: connecting again would only spend the caller's time
            # The session ended (a server restart, pg_terminate_backend), and the room and
            # the LISTEN with it: start again on a new one and have the caller look, since
            # a release may have come in between. If the server is gone, connecting says so.
            self._conn.close()
            self._conn = None
            self._conn = self._listen(self._pool.connect("listen for releases"), True)
        return None

    def _queue(self, timeout: float) -> None:
        """Block in the room's queue on the server for up to ``timeout`` seconds."""
        assert self._conn is not None
        wait_ms = max(1, int(timeout * 1000))
        # The timeouts stay set while this waiter owns the connection (its other use is
        # reading notices, which they do not bound); close() resets them.
        conn = self._conn
        conn.io_timeout = self._pool.io_timeout + wait_ms / 1000  # the server answers late
        try:
            with translated("wait for a release", self._pool.where):
                try:
                    conn.execute(
                        f"SET lock_timeout = {wait_ms:d}; "
                        f"SET statement_timeout = {wait_ms + STATEMENT_MARGIN_MS:d}; "
                        f"SELECT pg_advisory_lock({self._room:d})"
                    )
                except pg_errors.LockNotAvailable:
                    return  # still queued; the caller looks once, then waits again
        finally:
            conn.io_timeout = self._pool.io_timeout
        self._head = True

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if not reachable or conn.closed:
            conn.close()  # no round trip: the LISTEN and the room end with the session
            return
        try:
            with translated("stop listening", self._pool.where):
                conn.execute(
                    "UNLISTEN *; SELECT pg_advisory_unlock_all(); "
                    "RESET lock_timeout; RESET statement_timeout"
                )
                # drain notices that came meanwhile, so the next user of this connection
                # is not woken by this key's release
                for _ in conn.notifies(timeout=0):
                    pass
        except Exception:  # a broken listen connection is simply dropped
            conn.close()
            return
        self._pool.give(conn)
