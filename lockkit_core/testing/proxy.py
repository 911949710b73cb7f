"""A loopback TCP proxy that tests steer to inject network faults between a client and a server.

``TcpProxy(host, port)`` listens on a free 127.0.0.1 port and forwards every connection to
``host:port``. While it runs, a test can

- ``partition()``: stop moving bytes in both directions, keeping every socket open (a
  blackhole: requests and replies wait, as on a cut link, until ``heal()``);
- ``reset()``: close every current connection abruptly (SO_LINGER 0, so both ends get RST);
- ``set_delay(seconds)``: hold every chunk that long before forwarding it, in each direction.

One thread runs the whole proxy with a selector. It is bounded: at most ``max_connections``
connections, ``max_buffer`` bytes waiting per direction (reading pauses beyond that), and it
shuts itself down after ``lifetime`` seconds even if nobody calls ``close()``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlencode

from .process import Closing

__all__ = ["TcpProxy"]

_LINGER_RST = struct.pack("ii", 1, 0)
_CHUNK = 65536


def _is_loopback(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def _abort(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    sock.close()


class _Direction:
    """Bytes flowing from ``src`` to ``dst``, each chunk with the time it may be sent."""

    __slots__ = ("buffered", "dst", "eof", "pending", "shut", "src")

    def __init__(self, src: socket.socket, dst: socket.socket) -> None:
        self.src = src
        self.dst = dst
        self.pending: deque[tuple[float, bytes]] = deque()
        self.buffered = 0
        self.eof = False  # src sent FIN
        self.shut = False  # FIN passed on to dst

    def done(self) -> bool:
        return self.shut


class _Connection:
    __slots__ = ("client", "down", "server", "up")

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.up = _Direction(client, server)
        self.down = _Direction(server, client)

    def sockets(self) -> tuple[socket.socket, socket.socket]:
        return self.client, self.server


class TcpProxy(Closing):
    """Forward 127.0.0.1:``port`` to ``target_host:target_port``, with faults on demand."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        max_connections: int = 256,
        max_buffer: int = 4 * 1024 * 1024,
        lifetime: float = 900.0,
        connect_timeout: float = 2.0,
    ) -> None:
        if not _is_loopback(target_host):
            raise ValueError(f"TcpProxy only forwards to loopback addresses, not {target_host!r}")
        self.target = (target_host, target_port)
        self.max_connections = max_connections
        self.max_buffer = max_buffer
        self.connect_timeout = connect_timeout
        self._expires = time.monotonic() + lifetime
        self._partitioned = False
        self._delay = 0.0
        self._conns: list[_Connection] = []
        self._commands: deque[Callable[[], None]] = deque()
        self._state_lock = threading.Lock()
        self._closed = threading.Event()
        self._stopped = threading.Event()
        self.accepted = 0
        self.bytes_forwarded = 0

        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._registered: dict[socket.socket, int] = {}
        self._thread = threading.Thread(
            target=self._run, name=f"lockkit-proxy-{self.port}", daemon=True
        )
        self._thread.start()

    # -- control (any thread) ------------------------------------------------------------------

    @property
    def host(self) -> str:
        """Always ``127.0.0.1``."""
        return "127.0.0.1"

    def url_for(self, scheme: str = "redis", db: int | str | None = 0, **options: object) -> str:
        """A URL through the proxy, e.g. ``redis://127.0.0.1:PORT/0?socket_timeout=1``."""
        url = f"{scheme}://127.0.0.1:{self.port}"
        if db is not None:
            url += f"/{db}"
        if options:
            url += "?" + urlencode({name: str(value) for name, value in options.items()})
        return url

    @property
    def partitioned(self) -> bool:
        """True between ``partition()`` and ``heal()``."""
        return self._partitioned

    def partition(self) -> None:
        """Stop forwarding bytes both ways; connections stay open and new ones are accepted."""
        self._call(lambda: setattr(self, "_partitioned", True))

    def heal(self) -> None:
        """Forward again; bytes held during the partition go through in order."""
        self._call(lambda: setattr(self, "_partitioned", False))

    def set_delay(self, seconds: float) -> None:
        """Hold every chunk read from now on ``seconds`` before forwarding it (each way)."""
        if not seconds >= 0:
            raise ValueError(f"delay must be >= 0 seconds, got {seconds!r}")
        self._call(lambda: setattr(self, "_delay", float(seconds)))

    def reset(self) -> None:
        """Abort every current connection with RST; later connections work normally."""
        self._call(self._reset_all)

    def connections(self) -> int:
        """How many client connections are open through the proxy."""
        with self._state_lock:
            return len(self._conns)

    def close(self) -> None:
        """Stop the proxy and abort its connections."""
        if not self._closed.is_set():
            self._closed.set()
            self._wake()
        self._thread.join(5.0)

    def __repr__(self) -> str:
        return f"<TcpProxy 127.0.0.1:{self.port} -> {self.target[0]}:{self.target[1]}>"

    def _call(self, command: Callable[[], None]) -> None:
        """Run ``command`` on the proxy thread and wait until it has taken effect."""
        if self._stopped.is_set():
            raise RuntimeError("the proxy is closed")
        done = threading.Event()

        def run() -> None:
            try:
                command()
            finally:
                done.set()

        with self._state_lock:
            self._commands.append(run)
        self._wake()
        if not done.wait(5.0) and not self._stopped.is_set():
            raise RuntimeError("the proxy thread did not answer within 5 s")

    def _wake(self) -> None:
        # OSError: the buffer is full (a wake-up is pending anyway) or the proxy is closed
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # -- the proxy thread ------------------------------------------------------------------------

    def _run(self) -> None:
        sel = self._selector
        sel.register(self._listener, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._closed.is_set():
                now = time.monotonic()
                if now >= self._expires:
                    break
                for key, _ in sel.select(self._next_timeout(now)):
                    sock = key.fileobj
                    if sock is self._listener:
                        self._accept()
                    elif sock is self._wake_r:
                        self._drain_wake()
                    else:
                        self._readable(sock)  # type: ignore[arg-type]
                self._run_commands()
                self._flush()
                self._update_interest()
        finally:
            self._shutdown()

    def _next_timeout(self, now: float) -> float:
        timeout = min(1.0, self._expires - now)
        if not self._partitioned:
            for conn in self._conns:
                for d in (conn.up, conn.down):
                    # chunks already due wait for EVENT_WRITE instead of a zero timeout
                    if d.pending and d.pending[0][0] > now:
                        timeout = min(timeout, d.pending[0][0] - now)
        return max(0.0, timeout)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _run_commands(self) -> None:
        while True:
            with self._state_lock:
                if not self._commands:
                    return
                command = self._commands.popleft()
            command()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(self._conns) >= self.max_connections:
                _abort(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=self.connect_timeout)
            except OSError:
                _abort(client)  # the target is down: the client sees a reset, as it would
                continue
            for sock in (client, server):
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._state_lock:
                self._conns.append(_Connection(client, server))
            self.accepted += 1

    def _find(self, sock: socket.socket) -> tuple[_Connection, _Direction] | None:
        for conn in self._conns:
            if sock is conn.client:
                return conn, conn.up
            if sock is conn.server:
                return conn, conn.down
        return None

    def _readable(self, sock: socket.socket) -> None:
        found = self._find(sock)
        if found is None:
            return
        conn, direction = found
        if self._partitioned or direction.eof:
            return
        try:
            data = sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)  # a reset on one side is passed on to the other
            return
        if not data:
            direction.eof = True
            return
        due = time.monotonic() + self._delay
        if direction.pending:
            due = max(due, direction.pending[-1][0])  # never reorder bytes
        direction.pending.append((due, data))
        direction.buffered += len(data)

    def _flush(self) -> None:
        if self._partitioned:
            return
        now = time.monotonic()
        for conn in list(self._conns):
            for direction in (conn.up, conn.down):
                if not self._flush_direction(conn, direction, now):
                    break
            else:
                if conn.up.done() and conn.down.done():
                    self._forget(conn)
                    for sock in conn.sockets():
                        sock.close()

    def _flush_direction(self, conn: _Connection, d: _Direction, now: float) -> bool:
        """Send what is due; False if the connection was dropped."""
        while d.pending and d.pending[0][0] <= now:
            due, data = d.pending[0]
            try:
                sent = d.dst.send(data)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                self._drop(conn)
                return False
            self.bytes_forwarded += sent
            d.buffered -= sent
            if sent < len(data):
                d.pending[0] = (due, data[sent:])
                return True
            d.pending.popleft()
        if d.eof and not d.pending and not d.shut:
            d.shut = True
            try:
                d.dst.shutdown(socket.SHUT_WR)
            except OSError:
                self._drop(conn)
                return False
        return True

    def _update_interest(self) -> None:
        wanted: dict[socket.socket, int] = {}
        now = time.monotonic()
        if not self._partitioned:
            for conn in self._conns:
                for d in (conn.up, conn.down):
                    if not d.eof and d.buffered < self.max_buffer:
                        wanted[d.src] = wanted.get(d.src, 0) | selectors.EVENT_READ
                    if d.pending and d.pending[0][0] <= now:
                        wanted[d.dst] = wanted.get(d.dst, 0) | selectors.EVENT_WRITE
        for sock, mask in list(self._registered.items()):
            if wanted.get(sock, 0) != mask:
                self._unregister(sock)
        for sock, mask in wanted.items():
            if mask and sock not in self._registered:
                self._selector.register(sock, mask)
                self._registered[sock] = mask

    def _forget(self, conn: _Connection) -> None:
        with self._state_lock:
            if conn in self._conns:
                self._conns.remove(conn)
        for sock in conn.sockets():
            self._unregister(sock)

    def _unregister(self, sock: socket.socket) -> None:
        if self._registered.pop(sock, None) is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)

    def _drop(self, conn: _Connection) -> None:
        self._forget(conn)
        for sock in conn.sockets():
            _abort(sock)

    def _reset_all(self) -> None:
        for conn in list(self._conns):
            self._drop(conn)

    def _shutdown(self) -> None:
        self._reset_all()
        self._selector.close()
        self._listener.close()
        self._stopped.set()
        self._run_commands()  # release anyone waiting in _call()
        self._wake_r.close()
        self._wake_w.close()
        self._closed.set()
