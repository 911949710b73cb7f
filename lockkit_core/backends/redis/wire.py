"""The lock operations' path to the server: commands packed once, sent on held connections.

Every lock operation is one script call whose shape never changes (``EVALSHA <sha> <numkeys>``
or ``FCALL <name> <numkeys>``, then the same number of keys and arguments), so the constant
head is packed once and only the keys and arguments are encoded per call. Sending goes
straight to a connection this module holds, bypassing redis-py's per-command path (a pool
checkout that polls the socket, retry and observability hooks, response callbacks): on a
loopback round trip that path costs about as much as the server's own work.

What stays redis-py's: connecting (TCP, TLS, unix sockets, AUTH, the handshake), the reply
parser (hiredis where installed) and the exception types, so the backend's error boundary
translates these failures exactly as it does the rest.
"""

from __future__ import annotations

import os
import select
import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    import redis
    from redis.connection import ConnectionPool

__all__ = ["Connections", "Packer", "connections_for"]

_POLL = hasattr(select, "poll")  # not on Windows


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), value)


def encode(value: object) -> bytes:
    """One argument as redis-py's default encoder sends it (UTF-8 text, numbers as text),
    refusing what it refuses with its ``DataError``."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return b"%d" % value
    if isinstance(value, float):
        return repr(value).encode()
    from redis.exceptions import DataError

    raise DataError(
        f"Invalid input of type: {type(value).__name__!r}. "
        "Convert to a bytes, string, int or float first."
    )


class Packer:
    """Packs ``head + parts`` in the Redis protocol, where ``head`` is fixed (the command, the
    script's digest or name, the key count) and packed once per argument count."""

    def __init__(self, head: Sequence[str | bytes | int]) -> None:
        self._head = b"".join(_bulk(encode(part)) for part in head)
        self._size = len(head)
        self._prefixes: dict[int, bytes] = {}

    def pack(self, parts: Sequence[object]) -> bytes:
        """The whole command, ready for the socket."""
        prefix = self._prefixes.get(len(parts))
        if prefix is None:
            prefix = b"*%d\r\n%b" % (self._size + len(parts), self._head)
            self._prefixes[len(parts)] = prefix
        chunks = [prefix]
        for part in parts:
            data = part.encode() if type(part) is str else encode(part)
            chunks.append(b"$%d\r\n%b\r\n" % (len(data), data))
        return b"".join(chunks)


class Connections:
    """Connections taken once from a redis-py pool and kept by this path.

    A call borrows an idle one (or takes a new one from the pool when all are busy, so
    threads never share a connection mid-command), sends one packed command, reads its
    reply and gives the connection back. A connection is given back only in a known state:
    after a complete reply (an error reply included), or disconnected, so the next call
    reconnects before sending; one the server closed while it was idle is replaced before
    sending. Connections inherited over ``fork()`` are never used: the child takes its own.
    They count toward the pool's ``max_connections``: one per thread that runs lock
    operations at the same moment.

    ``give_back=True`` (the pool is the app's: ``LockKit.from_redis``) returns each connection
    to the pool after its call instead, so the app's own commands can use it in between.
    """

    def __init__(self, pool: ConnectionPool, *, give_back: bool = False) -> None:
        from redis import exceptions

        self._response_error = exceptions.ResponseError
        self._dropped = (exceptions.ConnectionError, exceptions.TimeoutError, OSError)
        self._pool = pool
        self._idle: list[Any] = []
        self._pid = os.getpid()
        self._give_back = give_back

    def _checkout(self) -> Any:
        try:
            return self._pool.get_connection()
        except TypeError:  # redis-py before 5.3 wants a command name
            return self._pool.get_connection("EVALSHA")  # type: ignore[call-arg,unused-ignore]

    def _stale(self, conn: Any) -> bool:
        """Readable while idle: closed by the server (its ``timeout``, a restart, a proxy)
        or out of step. Start afresh, as redis-py's pool does, rather than fail a request
        that was never sent."""
        sock = getattr(conn, "_sock", None)  # ``is_connected`` is not in every redis-py 5
        if sock is None:
            return False  # sending connects it; checking first would connect twice
        if _POLL and not isinstance(sock, ssl.SSLSocket):
            # A plain socket: poll says as much as redis-py's can_read() for a seventh of
            # the cost. TLS has records below the data; there redis-py's check decides.
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        try:
            return bool(conn.can_read())
        except self._dropped:
            return True

    def call(self, packed: bytes, within: float | None = None) -> Any:
        """Send ``packed`` and return its parsed reply; raises redis-py's exceptions.

        ``within``: seconds to wait for the reply to start arriving (a blocking command on a
        slow link must not keep its caller past its own timeout); if none has, the connection
        is dropped (the reply can never be read as another command's) and None returned."""
        if self._pid != os.getpid():
            # The parent's sockets: using one would interleave two processes' replies.
            self._idle = []
            self._pid = os.getpid()
        try:
            conn = self._idle.pop()  # atomic: no two threads get the same connection
        except IndexError:
            conn = self._checkout()
        try:
            if self._stale(conn):
                conn.disconnect()
            if getattr(conn, "_sock", None) is None:
                # Connect through connect(), as the pool does: a Sentinel-managed connection
                # asks the sentinels for the master there (sending would connect to the
                # address it had, a master that may be gone).
                conn.connect()
            conn.send_packed_command((packed,))
            if within is not None and not _readable(conn, within):
                conn.disconnect()
                return None
            return conn.read_response()
        except self._response_error:
            raise  # the whole error reply was read: the connection is in step
        except BaseException:
            # A reply may still be on its way (timeout, interrupt): it must never be read
            # as the answer to the next command.
            conn.disconnect()
            raise
        finally:
            if self._give_back:
                self._pool.release(conn)
            else:
                self._idle.append(conn)


def _readable(conn: Any, seconds: float) -> bool:
    """Whether a reply starts arriving on ``conn`` within ``seconds`` (a TLS socket, whose
    records hide the data from poll, is taken as readable: its read waits instead)."""
    sock = getattr(conn, "_sock", None)
    if sock is None or not _POLL or isinstance(sock, ssl.SSLSocket):
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(max(0.0, seconds) * 1000.0))


# By client, not by pool: the value holds the pool (and its sockets), and a weak key must not
# be reachable from its own value, or neither is ever freed.
_BY_CLIENT: WeakKeyDictionary[redis.Redis, Connections] = WeakKeyDictionary()


def connections_for(client: redis.Redis, *, give_back: bool = False) -> Connections:
    """The held connections of ``client`` (one set per client, shared by its scripts);
    closed when the client is dropped, or by ``client.close()`` (they are its pool's).
    ``give_back``: see :class:`Connections` (the first call for a client decides)."""
    found = _BY_CLIENT.get(client)
    if found is None:
        found = _BY_CLIENT.setdefault(
            client, Connections(client.connection_pool, give_back=give_back)
        )
    return found
