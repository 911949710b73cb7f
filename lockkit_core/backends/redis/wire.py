"""The lock operations' path to the server: commands packed once, sent on held connections.

Every lock operation is one script call whose shape never changes (``EVALSHA <sha> <numkeys>``
or ``FCALL <name> <numkeys>``, then the same number of keys and arguments), so the constant
head is packed once and only the keys and arguments are encoded per call. Sending goes
straight to the socket of a connection this module holds, and the reply is parsed here
(:mod:`.resp`), bypassing redis-py's per-command path (a pool checkout that polls the
socket, retry and observability hooks, a line-by-line reader, response callbacks): on a
loopback round trip that path costs about as much as the server's own work.

What stays redis-py's: connecting (TCP, TLS, unix sockets, AUTH, the handshake, health
checks) and the exception types, so the backend's error boundary translates these failures
exactly as it does the rest.
"""

from __future__ import annotations

import os
import select
import socket
import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from .resp import INCOMPLETE, parse_reply

if TYPE_CHECKING:
    import redis
    from redis.connection import ConnectionPool

__all__ = ["Connections", "Packer", "Pending", "connections_for"]

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

    def pack_text(self, parts: Sequence[str]) -> bytes:
        """:meth:`pack` for parts that are all ``str``, a third faster: formatted as text and
        encoded once. Lengths count characters, which are bytes only for ASCII; other text
        goes through :meth:`pack`."""
        body = "".join([f"${len(part)}\r\n{part}\r\n" for part in parts])
        if not body.isascii():
            return self.pack(parts)
        prefix = self._prefixes.get(len(parts))
        if prefix is None:
            prefix = self._prefixes[len(parts)] = b"*%d\r\n%b" % (
                self._size + len(parts),
                self._head,
            )
        return prefix + body.encode()


class _Held:
    """A connection of the pool, and a poll object on its current socket (made again when a
    reconnection gives it a new one)."""

    __slots__ = ("conn", "poller", "sock")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sock: Any = None
        self.poller: Any = None

    def readable(self, sock: socket.socket) -> bool:
        """Whether the plain socket ``sock`` has something to read (or was closed)."""
        if sock is not self.sock:
            self.sock, self.poller = sock, select.poll()
            self.poller.register(sock, select.POLLIN)
        return bool(self.poller.poll(0))


class Connections:
    """Connections taken once from a redis-py pool and kept by this path.

    A call borrows an idle one (or takes a new one from the pool when all are busy, so
    threads never share a connection mid-command), writes one packed command to its socket,
    reads the whole reply (:mod:`.resp`) and gives the connection back. A connection is given
    back only in a known state: after a complete reply (an error reply included), or
    disconnected, so the next call reconnects before sending; one the server closed while it
    was idle is replaced before sending, and one whose server answered READONLY (a demoted
    master) is reconnected, so a Sentinel-managed connection finds the new master. Connections
    inherited over ``fork()`` are never used: the child takes its own. They count toward the
    pool's ``max_connections``: one per thread that runs lock operations at the same moment.

    ``give_back=True`` (the pool is the app's: ``LockKit.from_redis``) returns each connection
    to the pool after its call instead, so the app's own commands can use it in between; the
    reply is then read by redis-py (the app's connection may speak RESP3, or carry pushes).
    """

    def __init__(self, pool: ConnectionPool, *, give_back: bool = False) -> None:
        from redis import exceptions
        from redis._parsers import BaseParser

        self._connection_error = exceptions.ConnectionError
        self._response_error = exceptions.ResponseError
        self._read_only = exceptions.ReadOnlyError
        self._dropped = (exceptions.ConnectionError, exceptions.TimeoutError, OSError)
        self._parse_error = BaseParser.parse_error
        self._pool = pool
        from redis.connection import SSLConnection

        # TLS records hide from poll() whether a reply has started: a read kept pending
        # could not be given up at its caller's time (see Pending.read)
        self._tls = issubclass(getattr(pool, "connection_class", object), SSLConnection)
        self._idle: list[_Held] = []
        self._pid = os.getpid()
        self._give_back = give_back

    def _checkout(self) -> Any:
        try:
            return self._pool.get_connection()
        except TypeError:  # redis-py before 5.3 wants a command name
            return self._pool.get_connection("EVALSHA")  # type: ignore[call-arg,unused-ignore]

    def _stale(self, held: _Held) -> bool:
        """Readable while idle: closed by the server (its ``timeout``, a restart, a proxy)
        or out of step. Start afresh, as redis-py's pool does, rather than fail a request
        that was never sent."""
        conn = held.conn
        sock = getattr(conn, "_sock", None)  # ``is_connected`` is not in every redis-py 5
        if sock is None:
            return False  # sending connects it; checking first would connect twice
        if _POLL and not isinstance(sock, ssl.SSLSocket):
            # A plain socket: a poll object kept with it says as much as redis-py's
            # can_read() for a fraction of the cost. TLS has records below the data; there
            # redis-py's check decides.
            return held.readable(sock)
        try:
            return bool(conn.can_read())
        except self._dropped:
            return True

    def _take(self) -> _Held:
        """An idle connection of this process, or a new one from the pool."""
        if self._pid != os.getpid():
            # The parent's sockets: using one would interleave two processes' replies.
            self._idle = []
            self._pid = os.getpid()
        try:
            return self._idle.pop()  # atomic: no two threads get the same connection
        except IndexError:
            return _Held(self._checkout())

    def _ready(self, held: _Held) -> None:
        """Reconnect ``held`` if it went stale or has no socket; else check its health."""
        conn = held.conn
        if self._stale(held):
            conn.disconnect()
        if getattr(conn, "_sock", None) is None:
            # Connect through connect(), as the pool does: a Sentinel-managed connection
            # asks the sentinels for the master there (sending would connect to the
            # address it had, a master that may be gone).
            conn.connect()
        elif not self._give_back and conn.health_check_interval:
            conn.check_health()  # (redis-py's send does it on the app's connections)

    def call(self, packed: bytes, within: float | None = None) -> Any:
        """Send ``packed`` and return its parsed reply; raises redis-py's exceptions (and
        ``TimeoutError`` past the socket timeout).

        ``within``: seconds to wait for the reply to start arriving (a blocking command on a
        slow link must not keep its caller past its own timeout); if none has, the connection
        is dropped (the reply can never be read as another command's) and None returned."""
        held = self._take()
        conn = held.conn
        try:
            self._ready(held)
            if self._give_back:
                conn.send_packed_command((packed,))
                if within is not None and not _readable(conn, within):
                    conn.disconnect()
                    return None
                reply = conn.read_response()
            else:
                reply = self._exchange(conn, packed, within)
                if reply is _UNANSWERED:
                    conn.disconnect()
                    return None
                if isinstance(reply, self._read_only):
                    # A master demoted by a failover: the next call connects afresh (to the
                    # new master, under Sentinel), as redis-py's Sentinel connection does.
                    conn.disconnect()
        except self._response_error:
            raise  # redis-py read the whole error reply: the connection is in step
        except BaseException as exc:
            # A reply may still be on its way (timeout, interrupt): it must never be read
            # as the answer to the next command.
            conn.disconnect()
            if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
                raise self._connection_error(f"Error while talking to redis: {exc}") from exc
            raise
        finally:
            if self._give_back:
                self._pool.release(conn)
            else:
                self._idle.append(held)
        if isinstance(reply, Exception):
            raise reply  # an error reply, read whole: the connection is in step
        return reply

    @property
    def pipelines(self) -> bool:
        """Whether :meth:`call_pair` may be used: not on the app's own pool, whose
        connections redis-py reads, nor over TLS."""
        return not self._give_back and not self._tls

    def call_pair(self, packed: bytes) -> tuple[Any, Pending]:
        """Send ``packed``, two commands in one write, and return the first one's reply (an
        error reply as its exception, not raised) and the second's, still to come: the
        connection stays with the :class:`Pending` until that is read or dropped. Raises
        as :meth:`call` for a failure of the connection."""
        held = self._take()
        conn = held.conn
        try:
            self._ready(held)
            sock: socket.socket = conn._sock
            sock.sendall(packed)
            reply, rest = self._read(sock, b"")
        except BaseException as exc:
            conn.disconnect()
            self._idle.append(held)
            if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
                raise self._connection_error(f"Error while talking to redis: {exc}") from exc
            raise
        return reply, Pending(self, held, rest)

    def _read(self, sock: socket.socket, buf: bytes) -> tuple[Any, bytes]:
        """Read on from ``buf`` until one reply is whole: it, and the bytes after it."""
        while True:
            if buf:
                reply, end = parse_reply(buf, 0, self._parse_error)
                if reply is not INCOMPLETE:
                    return reply, buf[end:]
            more = sock.recv(65536)
            if not more:
                raise self._connection_error("Connection closed by server.")
            buf += more

    def _exchange(self, conn: Any, packed: bytes, within: float | None = None) -> Any:
        """Write ``packed``, read until its reply is whole (the socket's timeout bounds
        each read); :data:`_UNANSWERED` if no reply started within ``within`` seconds."""
        sock: socket.socket = conn._sock
        sock.sendall(packed)
        if within is not None and not _readable(conn, within):
            return _UNANSWERED
        buf = b""
        while True:
            more = sock.recv(65536)
            if not more:
                raise self._connection_error("Connection closed by server.")
            buf += more
            reply, _ = parse_reply(buf, 0, self._parse_error)
            if reply is not INCOMPLETE:
                return reply


class Pending:
    """The reply still to come of the second command of :meth:`Connections.call_pair`; its
    connection is lent to it until :meth:`read` or :meth:`drop`."""

    def __init__(self, connections: Connections, held: _Held, rest: bytes) -> None:
        self._connections = connections
        self._held: _Held | None = held
        self._rest = rest

    def read(self, within: float) -> Any:
        """The reply, if it starts arriving within ``within`` seconds; else None, and the
        connection is dropped (its reply can never be read as another command's). Raises
        as :meth:`Connections.call`."""
        held = self._held
        assert held is not None, "read or dropped already"
        self._held = None
        connections = self._connections
        conn = held.conn
        try:
            if not self._rest and not _readable(conn, within):
                conn.disconnect()
                return None
            reply, _ = connections._read(conn._sock, self._rest)
        except BaseException as exc:
            conn.disconnect()
            if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
                raise connections._connection_error(f"Error while talking to redis: {exc}") from exc
            raise
        finally:
            connections._idle.append(held)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def drop(self) -> None:
        """Give the connection back closed, its reply unread."""
        held, self._held = self._held, None
        if held is not None:
            held.conn.disconnect()
            self._connections._idle.append(held)


def _readable(conn: Any, seconds: float) -> bool:
    """Whether a reply starts arriving on ``conn`` within ``seconds`` (a TLS socket, whose
    records hide the data from poll, is taken as readable: its read waits instead)."""
    sock = getattr(conn, "_sock", None)
    if sock is None or not _POLL or isinstance(sock, ssl.SSLSocket):
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(max(0.0, seconds) * 1000.0))


#: what :meth:`Connections._exchange` returns when no reply started in time
_UNANSWERED = object()


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
