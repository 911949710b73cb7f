"""The shipped test tools themselves: ``RedisServer``, ``free_port`` and ``TcpProxy``."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from lockkit_core.testing import RedisServer, TcpProxy, free_port, redis_ping

PING = b"*1\r\n$4\r\nPING\r\n"


def _roundtrip(sock: socket.socket, payload: bytes = PING) -> bytes:
    sock.sendall(payload)
    return sock.recv(64)


def _command(port: int, *words: str) -> bytes:
    parts = [f"*{len(words)}\r\n".encode()]
    for word in words:
        parts.append(f"${len(word.encode())}\r\n{word}\r\n".encode())
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        return _roundtrip(sock, b"".join(parts))


@pytest.fixture
def echo_server() -> Iterator[int]:
    """A one-connection-at-a-time echo server on loopback; yields its port."""
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        conns: list[socket.socket] = []
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            conns.append(conn)
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()
        for conn in conns:
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(2)
    listener.close()


def _echo(conn: socket.socket) -> None:
    try:
        while data := conn.recv(65536):
            conn.sendall(data)
    except OSError:
        pass


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert 0 < port < 65536


def test_missing_redis_server_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr("os.access", lambda path, mode: False)
    with pytest.raises(RuntimeError) as caught:
        RedisServer()
    assert "apt-get install redis-server" in str(caught.value)
    assert "README" in str(caught.value)


@pytest.mark.redis
def test_redis_server_lifecycle() -> None:
    with RedisServer() as server:
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        assert redis_ping(server.port)
        assert _command(server.port, "SET", "k", "v") == b"+OK\r\n"
        port = server.port
        server.restart()
        assert server.port == port and redis_ping(port)
        assert _command(port, "GET", "k") == b"$-1\r\n", "a restart must start empty"
        server.pause()
        assert not redis_ping(port, timeout=0.2)
        server.resume()
        assert redis_ping(port)
        server.kill()
        assert not server.running()
        assert not redis_ping(port, timeout=0.2)
        server.start()
        assert server.port == port and redis_ping(port)
    assert not server.running()
    assert not server.dir.exists()


def test_proxy_forwards_both_ways(echo_server: int) -> None:
    with (
        TcpProxy("127.0.0.1", echo_server) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as sock,
    ):
        assert _roundtrip(sock, b"hello") == b"hello"
        big = b"x" * 1_000_000
        sock.sendall(big)
        received = b""
        while len(received) < len(big):
            received += sock.recv(65536)
        assert received == big
        assert proxy.connections() == 1


def test_proxy_only_targets_loopback() -> None:
    with pytest.raises(ValueError, match="loopback"):
        TcpProxy("192.0.2.1", 6379)


def test_proxy_url_for(echo_server: int) -> None:
    with TcpProxy("127.0.0.1", echo_server) as proxy:
        assert proxy.url_for() == f"redis://127.0.0.1:{proxy.port}/0"
        assert proxy.url_for("redis", 3, socket_timeout=1) == (
            f"redis://127.0.0.1:{proxy.port}/3?socket_timeout=1"
        )


def test_partition_holds_bytes_until_healed(echo_server: int) -> None:
    with (
        TcpProxy("127.0.0.1", echo_server) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as sock,
    ):
        assert _roundtrip(sock, b"a") == b"a"
        proxy.partition()
        assert proxy.partitioned
        sock.settimeout(0.3)
        sock.sendall(b"during")
        with pytest.raises(TimeoutError):
            sock.recv(64)
        proxy.heal()
        sock.settimeout(2)
        assert sock.recv(64) == b"during"


def test_reset_sends_rst_and_new_connections_work(echo_server: int) -> None:
    with TcpProxy("127.0.0.1", echo_server) as proxy:
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        assert _roundtrip(sock, b"a") == b"a"
        proxy.reset()
        with pytest.raises(ConnectionResetError):
            _roundtrip(sock, b"b")
            _roundtrip(sock, b"c")  # the first send may land before the RST is seen
        sock.close()
        assert proxy.connections() == 0
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as again:
            assert _roundtrip(again, b"d") == b"d"


def _timed_roundtrips(sock: socket.socket, data: bytes, times: int = 3) -> list[float]:
    """How long each of ``times`` round trips of ``data`` took (best of three: a loaded
    machine stretches single ones)."""
    took = []
    for _ in range(times):
        start = time.monotonic()
        assert _roundtrip(sock, data) == data
        took.append(time.monotonic() - start)
    return took


def test_delay_applies_to_each_direction(echo_server: int) -> None:
    with (
        TcpProxy("127.0.0.1", echo_server) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as sock,
    ):
        assert _roundtrip(sock, b"warm") == b"warm"
        proxy.set_delay(0.1)
        slow = _timed_roundtrips(sock, b"slow")
        # Load only adds: every round trip has both delays, the quickest no more than them.
        assert min(slow) >= 0.2 and min(slow) < 0.5, slow
        proxy.set_delay(0)
        fast = _timed_roundtrips(sock, b"fast")
        assert min(fast) < 0.1, fast
        with pytest.raises(ValueError):
            proxy.set_delay(-1)


def test_proxy_is_bounded(echo_server: int) -> None:
    with TcpProxy("127.0.0.1", echo_server, max_connections=1) as proxy:
        first = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
        assert _roundtrip(first, b"1") == b"1"
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            second = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)
            try:
                second.sendall(b"2")
                second.recv(64)
            finally:
                second.close()
        assert _roundtrip(first, b"3") == b"3"
        first.close()
    proxy = TcpProxy("127.0.0.1", echo_server, lifetime=0.2)
    time.sleep(0.5)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=1)
    with pytest.raises(RuntimeError, match="closed"):
        proxy.partition()
    proxy.close()


def test_closed_proxy_refuses_connections(echo_server: int) -> None:
    proxy = TcpProxy("127.0.0.1", echo_server)
    port = proxy.port
    proxy.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1)


def test_proxy_to_a_dead_target_resets_the_client() -> None:
    with TcpProxy("127.0.0.1", free_port()) as proxy:
        # The reset may reach the client while it connects or on its first read.
        with (
            pytest.raises(ConnectionResetError),
            socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as sock,
        ):
            sock.sendall(b"x")
            sock.recv(64)
        assert proxy.connections() == 0


@pytest.mark.mysql
def test_mariadb_servers_started_at_once_all_come_up() -> None:
    """Each MariaDB keeps its temporary files in its own directory: installs sharing /tmp
    collided on the bootstrap's temporary table names (3 of 18 starts failed, three at a
    time), as pytest-xdist workers starting their session servers together do."""
    import threading

    from lockkit_core.testing.mariadb import MariaDBServer

    started: list[MariaDBServer] = []
    failed: list[BaseException] = []

    def start() -> None:
        try:
            started.append(MariaDBServer())
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not failed, failed[0]
        assert all(server.running() for server in started)
    finally:
        for server in started:
            server.close()
