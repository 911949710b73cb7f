"""Waiting on MariaDB / MySQL: one waiter per key polls, the others queue inside the server.

MySQL has no notifications, so a waiter must look again to see a release. So that a busy key
costs one poller however many wait, waiters take places in the key's *waiting room*, a
``GET_LOCK`` on a digest of the key held by a connection of the waiter's own: the holder of
that user lock (the head) backs off and tries (0.5 ms to 50 ms, bounded by the holder's
lease), the others block in ``GET_LOCK`` on the server, sending nothing, until the head
leaves (it got the lock, gave up, or its process died: the server ends its session and frees
the user lock). The room only orders waiters: the lease table alone decides who holds the
lock, so a digest collision between two keys delays, never excludes.
"""

from __future__ import annotations

import hashlib
import time

from ..base import Grant, SleepWaiter, Waiter
from .mypool import Conn, MyPool, execute, forget

__all__ = ["RoomWaiter", "waiting_room"]


def waiting_room(table: str, key: str) -> str:
    """The ``GET_LOCK`` name of ``key``'s waiting room: 48 characters, within the 64 allowed."""
    digest = hashlib.sha1(f"{table}\0{key}".encode("utf-8", "surrogatepass")).hexdigest()  # noqa: S324
    return "lockkit:" + digest


class RoomWaiter(Waiter):
    """Takes the room at once if it is free (before the attempt it precedes); in ``wait()``,
    queues for it on the server or, at the head, backs off."""

    def __init__(self, pool: MyPool, room: str, slice_seconds: float) -> None:
        self._pool = pool
        self._room = room
        #: the longest one server-side wait may take: well inside the read timeout
        self._slice = slice_seconds
        self._backoff = SleepWaiter()
        conn, _ = pool.take("wait for a release")
        self._conn: Conn | None = conn
        try:
            self._head = self._get_lock(0)
        except BaseException:
            forget(conn)
            self._conn = None
            raise

    def _get_lock(self, seconds: float) -> bool:
        assert self._conn is not None
        done = execute(
            self._conn,
            "SELECT GET_LOCK(%s, %s)",
            [self._room, seconds],
            "wait for a release",
            self._pool.where,
        )
        return bool(done[0][1][0][0] == 1)

    def wait(self, timeout: float) -> Grant | None:
        if self._head:
            return self._backoff.wait(timeout)
        seconds = max(0.0, min(timeout, self._slice))
        started = time.monotonic()
        try:
            self._head = self._get_lock(seconds)
        except BaseException:
            if self._conn is not None:
                forget(self._conn)
            self._conn = None
            raise
        if not self._head and time.monotonic() - started < seconds / 2:
            # a server that counts GET_LOCK's wait in whole seconds (MySQL) answered at once
            self._backoff.wait(seconds - (time.monotonic() - started))
        return None  # at the head now (the key may be free), or the slice is over: look

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if not reachable:
            forget(conn)  # the room is freed with the session
            return
        try:
            execute(conn, "SELECT RELEASE_ALL_LOCKS()", [], "leave the queue", self._pool.where)
        except Exception:  # a broken connection is simply dropped, and its room with it
            forget(conn)
            return
        self._pool.give(conn)
