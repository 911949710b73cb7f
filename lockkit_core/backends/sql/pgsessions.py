"""The connections that hold PostgreSQL advisory locks, and the thread that hears them die.

An advisory lock lives in one server session: the connection that took it must stay open,
unused by anything else, until the lock is released, and when the session ends (the server
restarted, ``pg_terminate_backend``, a network that dropped it) the lock is gone with it.
:class:`HeldSessions` keeps one connection per held ``(key, owner)``; its watcher thread
waits on their sockets, which stay silent while the session lives, and reads any that
speaks: a session the server ended sends its FATAL message and closes, so the holder's
``Hold`` is marked lost (``on_lost`` runs, ``check()`` raises ``LockLost``) at once, with no
statement sent. A link that goes dark without a word is caught by the connections' TCP
keepalives and user timeout (see ``postgres_conninfo``), which fail the socket.

On Linux the sockets are watched with ``epoll``, whose set the locking thread changes itself:
a lock taken or released costs the watcher no wake-up (waking it, a thread switch and a turn
of the GIL, was a third of an uncontended cycle). Elsewhere the watcher ``poll``s a set it
rebuilds when woken through a pipe on every change.
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

#: the kernel's own watch set, changed without waking the watcher (Linux)
EPOLL = hasattr(select, "epoll")


@dataclass(slots=True)  # one is made per lock taken: slots make that cheaper
class HeldSession:
    """One held lock's connection; ``busy`` is held while a statement runs on it."""

    conn: BoundedConnection
    fd: int  #: its socket, as registered with the watcher
    hold: Any = None  #: the lockkit Hold, once the kit has made it (``track``)
    busy: threading.Lock = field(default_factory=threading.Lock)
    lost: str | None = None


class HeldSessions:
    """``(key, owner) -> HeldSession``, watched for sessions that end."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._by_owner: dict[tuple[str, str], HeldSession] = {}
        #: the watched sockets: ``fd -> ((key, owner), session)``
        self._by_fd: dict[int, tuple[tuple[str, str], HeldSession]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._open_wakers()

    def _open_wakers(self) -> None:
        self._pid = os.getpid()
        self._wake_r, self._wake_w = os.pipe()
        self._epoll = select.epoll() if EPOLL else None
        if self._epoll is not None:
            self._epoll.register(self._wake_r, select.EPOLLIN)

    def add(self, key: str, owner: str, conn: BoundedConnection) -> None:
        session = HeldSession(conn, conn.pgconn.socket)
        key_owner = (key, owner)
        with self._lock:
            self._by_owner[key_owner] = session
            self._by_fd[session.fd] = (key_owner, session)
            if self._epoll is not None:
                try:
                    self._epoll.register(session.fd, select.EPOLLIN)
                except FileExistsError:  # a socket closed unseen left its number behind
                    self._epoll.modify(session.fd, select.EPOLLIN)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._watch, name="lockkit-pg-sessions", daemon=True
                )
                self._thread.start()
        if self._epoll is None:
            self._wake()

    def get(self, key: str, owner: str) -> HeldSession | None:
        # one lookup, atomic in a dict: the table's lock would only add its own cost
        return self._by_owner.get((key, owner))

    def pop(self, key: str, owner: str) -> HeldSession | None:
        """Stop watching ``owner``'s session on ``key``; call it holding the session's
        ``busy`` lock, and keep holding it until the connection is back in the pool, so the
        watcher never reads a connection that serves another call."""
        with self._lock:
            found = self._by_owner.pop((key, owner), None)
            if found is not None:
                self._unwatch(found)
        if self._epoll is None:
            self._wake()
        return found

    def _unwatch(self, session: HeldSession) -> None:
        """Take ``session``'s socket out of the watch set (holding ``_lock``)."""
        entry = self._by_fd.get(session.fd)
        if entry is None or entry[1] is not session:
            return  # its number serves another session now: that one stays watched
        del self._by_fd[session.fd]
        if self._epoll is not None and not session.conn.closed:
            # a closed socket has left the epoll set by itself; not contextlib.suppress: a
            # context manager per release is a measurable part of an uncontended cycle
            try:  # noqa: SIM105
                self._epoll.unregister(session.fd)
            except OSError:
                pass

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

    def _ready(self) -> list[tuple[int, int]]:
        """Wait for a watched socket (or the wake pipe) to speak: ``[(fd, events)]``."""
        if self._epoll is not None:
            return self._epoll.poll()
        with self._lock:
            fds = list(self._by_fd)
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        for fd in fds:
            poller.register(fd, select.POLLIN)
        return poller.poll()

    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._closed or os.getpid() != self._pid:
                    return
            try:
                ready = self._ready()
            except OSError:  # a socket (or the epoll set, at close) closed under us
                continue
            for fd, _ in ready:
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                with self._lock:
                    found = self._by_fd.get(fd)
                if found is not None:
                    self._heard(*found)

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
            with self._lock:
                # out of the watch set before the socket closes and its number is reused
                if self._by_owner.get(key_owner) is session:
                    del self._by_owner[key_owner]
                self._unwatch(session)
            session.conn.close()
        finally:
            session.busy.release()
        if session.hold is not None:
            session.hold.mark_lost(reason)  # which logs it
        else:
            log.warning("%s", reason)

    def forget_after_fork(self) -> list[BoundedConnection]:
        """The parent's connections, dropped here without closing them (the caller keeps them
        referenced: closing would end the parent's sessions, and its locks). The child gets
        a watch set and wake pipe of its own: the inherited ones are the parent's. The
        table's lock is replaced, not taken: the parent's watcher may have held it at the
        fork, and no thread of the child would ever release it."""
        self._lock = threading.Lock()
        inherited = [s.conn for s in self._by_owner.values()]
        self._by_owner = {}
        self._by_fd = {}
        self._thread = None
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)  # our copies only: the parent's stay open
        if self._epoll is not None:
            self._epoll.close()
        self._open_wakers()
        return inherited

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sessions = list(self._by_owner.values())
            self._by_owner.clear()
            self._by_fd.clear()
            thread, self._thread = self._thread, None
        self._wake()
        for session in sessions:
            session.conn.close()  # the server frees their locks with the sessions
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)
        if thread is None or not thread.is_alive():
            os.close(self._wake_w)
            os.close(self._wake_r)
            if self._epoll is not None:
                self._epoll.close()
