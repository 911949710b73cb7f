"""The connections that hold PostgreSQL advisory locks, and the thread that hears them die.

An advisory lock lives in one server session: the connection that took it must stay open,
unused by anything else, until the lock is released, and when the session ends (the server
restarted, ``pg_terminate_backend``, a network that dropped it) the lock is gone with it.
:class:`HeldSessions` keeps one connection per held ``(key, owner)``; its watcher thread
``poll``s their sockets, which stay silent while the session lives, and reads any that
speaks: a session the server ended sends its FATAL message and closes, so the holder's
``Hold`` is marked lost (``on_lost`` runs, ``check()`` raises ``LockLost``) at once, with no
statement sent. A link that goes dark without a word is caught by the connections' TCP
keepalives and user timeout (see ``postgres_conninfo``), which fail the socket.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.pq import ConnStatus

from .pgpool import BoundedConnection

__all__ = ["HeldSession", "HeldSessions"]

log = logging.getLogger("lockkit.postgresql")


@dataclass
class HeldSession:
    """One held lock's connection; ``busy`` is held while a statement runs on it."""

    conn: BoundedConnection
    hold: Any = None  #: the lockkit Hold, once the kit has made it (``track``)
    busy: threading.Lock = field(default_factory=threading.Lock)
    lost: str | None = None


class HeldSessions:
    """``(key, owner) -> HeldSession``, watched for sessions that end."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._by_owner: dict[tuple[str, str], HeldSession] = {}
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._pid = os.getpid()

    def add(self, key: str, owner: str, conn: BoundedConnection) -> None:
        with self._lock:
            self._by_owner[(key, owner)] = HeldSession(conn)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._watch, name="lockkit-pg-sessions", daemon=True
                )
                self._thread.start()
        self._wake()

    def get(self, key: str, owner: str) -> HeldSession | None:
        with self._lock:
            return self._by_owner.get((key, owner))

    def pop(self, key: str, owner: str) -> HeldSession | None:
        """Stop watching ``owner``'s session on ``key``; call it holding the session's
        ``busy`` lock, and keep holding it until the connection is back in the pool, so the
        watcher never reads a connection that serves another call."""
        with self._lock:
            found = self._by_owner.pop((key, owner), None)
        self._wake()
        return found

    def track(self, hold: Any) -> None:
        """Tie ``hold`` to its session, so a session that ends marks it lost."""
        session = self.get(hold.full_key, hold.owner)
        if session is None:
            return
        session.hold = hold
        if session.lost is not None:  # it died between the grant and now
            hold.mark_lost(session.lost)

    def _wake(self) -> None:
        # closed, or the pipe is full: the thread wakes anyway
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._closed or os.getpid() != self._pid:
                    return
                watched = {
                    s.conn.pgconn.socket: (k, s)
                    for k, s in self._by_owner.items()
                    if not s.conn.closed
                }
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            for fd in watched:
                poller.register(fd, select.POLLIN)
            try:
                ready = poller.poll()
            except OSError:  # a socket closed under us: look again
                continue
            for fd, _ in ready:
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                elif fd in watched:
                    self._heard(*watched[fd])

    def _heard(self, key_owner: tuple[str, str], session: HeldSession) -> None:
        """The holding session's socket spoke: a session that ended marks its hold lost."""
        if not session.busy.acquire(blocking=False):
            return  # the holder is using it (a release): that answer is its own
        try:
            with self._lock:
                if self._by_owner.get(key_owner) is not session:
                    return  # released meanwhile: the connection may serve another call now
            pgconn = session.conn.pgconn
            try:
                pgconn.consume_input()
                ended = pgconn.status == ConnStatus.BAD
            except psycopg.OperationalError:
                ended = True
            if not ended:
                return
            reason = (
                f"the PostgreSQL session at {self.where} that held the advisory lock ended "
                "(a server restart, pg_terminate_backend or a dropped connection), and the "
                "lock with it"
            )
            session.lost = reason
            session.conn.close()
        finally:
            session.busy.release()
        with self._lock:
            if self._by_owner.get(key_owner) is session:
                del self._by_owner[key_owner]
        if session.hold is not None:
            session.hold.mark_lost(reason)  # which logs it
        else:
            log.warning("%s", reason)

    def forget_after_fork(self) -> list[BoundedConnection]:
        """The parent's connections, dropped here without closing them (the caller keeps them
        referenced: closing would end the parent's sessions, and its locks)."""
        with self._lock:
            inherited = [s.conn for s in self._by_owner.values()]
            self._by_owner.clear()
            self._thread = None
            self._pid = os.getpid()
        return inherited

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sessions = list(self._by_owner.values())
            self._by_owner.clear()
            thread, self._thread = self._thread, None
        self._wake()
        for session in sessions:
            session.conn.close()  # the server frees their locks with the sessions
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)
        if thread is None or not thread.is_alive():
            os.close(self._wake_w)
            os.close(self._wake_r)
