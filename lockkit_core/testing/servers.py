"""Start real servers on free loopback ports for tests: ``RedisServer``, ``free_port()``.

The server runs in its own temporary directory, with persistence off, bound to 127.0.0.1 only,
so a test can kill, pause or restart it without touching anything else on the machine. It can
also listen on a unix socket, run as a one-node Redis Cluster that owns every slot, or run with
its wall clock shifted (``clockshift.c``, built with the system C compiler on first use) so that
a test can step the clock back or forth while it runs (``step_clock()``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from .process import ServerProcess, die_with_parent_prefix, free_port, spawn_logged

__all__ = ["RedisServer", "build_clock_shifter", "free_port", "redis_ping"]

_LOOPBACK = "127.0.0.1"
_INSTALL_HINT = (
    "redis-server is not installed; run the test command from README.md (it installs it), "
    "or install it yourself with: sudo apt-get install redis-server"
)


def redis_ping(port: int, host: str = _LOOPBACK, timeout: float = 0.5) -> bool:
    """True if a Redis server on ``host:port`` answers ``PING`` with ``PONG`` within ``timeout``."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = sock.recv(64)
                if not chunk:
                    return False
                reply += chunk
            return reply.startswith(b"+PONG")
    except OSError:
        return False


def _command(port: int, *words: str, timeout: float = 2.0) -> bytes:
    """Send one command and return its first reply line (or a whole bulk reply), raw."""
    request = f"*{len(words)}\r\n".encode() + b"".join(
        f"${len(w.encode())}\r\n{w}\r\n".encode() for w in words
    )
    with socket.create_connection((_LOOPBACK, port), timeout=timeout) as sock:
        sock.sendall(request)
        reply = b""
        while b"\r\n" not in reply:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        head, _, rest = reply.partition(b"\r\n")
        if head.startswith(b"$") and int(head[1:]) >= 0:
            size = int(head[1:])
            while len(rest) < size:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                rest += chunk
            return rest[:size]
        return head


def find_redis_server() -> str:
    """Path of the ``redis-server`` executable; a clear ``RuntimeError`` if there is none."""
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )
    if found is None:
        raise RuntimeError(_INSTALL_HINT)
    return found


_built: dict[str, str] = {}  # source path -> shared library, once per process


def build_clock_shifter() -> str:
    """Compile ``clockshift.c`` (once per process) and return the shared library's path.

    A ``RuntimeError`` names what to install when there is no C compiler. (libfaketime would do,
    but it deadlocks at start-up in a redis-server linked with jemalloc, as Debian's is.)
    """
    source = Path(__file__).with_name("clockshift.c")
    done = _built.get(str(source))
    if done is not None and os.path.exists(done):
        return done
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError(
            "stepping a test server's clock needs a C compiler; install one with: "
            "sudo apt-get install gcc libc6-dev"
        )
    out = Path(tempfile.mkdtemp(prefix="lockkit-clock-")) / "clockshift.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    _built[str(source)] = str(out)
    return str(out)


class RedisServer(ServerProcess):
    """A throwaway ``redis-server`` on a free loopback port.

    ``with RedisServer() as server: LockKit(server.url)``. ``kill()`` sends SIGKILL,
    ``pause()``/``resume()`` SIGSTOP/SIGCONT, ``restart()`` comes back on the same port with
    an empty dataset (nothing is persisted). Start and restart it from a thread that lives
    as long as the server should: on Linux the server is stopped when that thread exits.

    ``unix_socket=True`` also listens on ``socket_path`` (``unix_url``); ``cluster=True`` runs a
    one-node Redis Cluster that serves every hash slot (cross-slot commands fail there as on a
    real cluster); ``fake_clock=True`` runs the server with a wall clock that
    ``step_clock()`` moves while it runs and across restarts. ``extra_args`` go to the server's
    command line after ours (``redis_tls.TlsRedisServer`` adds its TLS port that way).
    """

    program: ClassVar[str] = "redis-server"
    stop_wait: ClassVar[float] = 5.0
    poll_interval: ClassVar[float] = 0.02

    def __init__(
        self,
        port: int | None = None,
        *,
        executable: str | None = None,
        startup_timeout: float = 10.0,
        unix_socket: bool = False,
        cluster: bool = False,
        fake_clock: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.executable = executable or find_redis_server()
        self.startup_timeout = startup_timeout
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port()
        self._tmp = tempfile.TemporaryDirectory(prefix="lockkit-redis-")
        self.dir = Path(self._tmp.name)
        self.log_path = self.dir / "redis.log"
        self.socket_path = self.dir / "redis.sock" if unix_socket else None
        self.cluster = cluster
        #: more ``--name value`` arguments for the server (TLS, ACL users, replication)
        self.extra_args = list(extra_args)
        self._shifter = build_clock_shifter() if fake_clock else None
        self.clock_offset = 0.0
        if fake_clock:
            self._write_clock()
        self.start()

    @property
    def clock_file(self) -> Path:
        """The file the server reads its clock offset from (microseconds), on every read."""
        return self.dir / "clock-offset"

    def _write_clock(self) -> None:
        tmp = self.dir / "clock-offset.tmp"
        tmp.write_text(f"{round(self.clock_offset * 1e6):+d}\n")
        tmp.replace(self.clock_file)  # never let the server read a half-written offset

    def step_clock(self, seconds: float) -> None:
        """Move the (faked) server wall clock by ``seconds``, at once; negative steps back.
        The monotonic clock is left alone, as a real clock step would leave it."""
        if self._shifter is None:
            raise RuntimeError("step_clock() needs RedisServer(fake_clock=True)")
        self.clock_offset += seconds
        self._write_clock()

    @property
    def unix_url(self) -> str:
        """``unix:///.../redis.sock`` (needs ``unix_socket=True``)."""
        if self.socket_path is None:
            raise RuntimeError("unix_url needs RedisServer(unix_socket=True)")
        return f"unix://{self.socket_path}"

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://{_LOOPBACK}:{self.port}/0"

    def _start_attempts(self) -> int:
        return 1 if self._fixed_port else 5

    def _launch(self) -> subprocess.Popen[bytes]:
        args = [
            *die_with_parent_prefix(),
            self.executable,
            "--port",
            str(self.port),
            "--bind",
            _LOOPBACK,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir),
            "--daemonize",
            "no",
            "--logfile",
            "",
        ]
        if self.socket_path is not None:
            args += ["--unixsocket", str(self.socket_path), "--unixsocketperm", "700"]
        if self.cluster:
            nodes = self.dir / f"nodes-{self.port}.conf"
            nodes.unlink(missing_ok=True)  # a restart without persistence forgets its slots too
            args += ["--cluster-enabled", "yes", "--cluster-config-file", str(nodes)]
        args += self.extra_args
        env = dict(os.environ)
        if self._shifter is not None:
            env.update(LD_PRELOAD=self._shifter, LOCKKIT_CLOCK_FILE=str(self.clock_file))
        return spawn_logged(args, self.log_path, self.dir, env=env)

    def _ready(self, deadline: float) -> bool:
        return redis_ping(self.port) and (not self.cluster or self._claim_all_slots(deadline))

    def _claim_all_slots(self, deadline: float) -> bool:
        """Make this node own all 16384 slots and wait until the cluster says it is ok."""
        if _command(self.port, "CLUSTER", "ADDSLOTSRANGE", "0", "16383") != b"+OK":
            return False
        while time.monotonic() < deadline:
            if b"cluster_state:ok" in _command(self.port, "CLUSTER", "INFO"):
                return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        """Shut the server down (SIGTERM; SIGKILL if it lingers). Nothing is saved."""
        self._terminate(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        self._terminate(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open but nothing answers."""
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError("the redis-server is not running")
        self._proc.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT a paused server."""
        if self._proc is not None and self._paused:
            self._proc.send_signal(signal.SIGCONT)
        self._paused = False

    def restart(self) -> None:
        """Stop and start again on the same port; the dataset starts empty."""
        self.stop()
        self._fixed_port = True
        self.start()

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        self._tmp.cleanup()

    def __repr__(self) -> str:
        state = "running" if self.running() else "stopped"
        return f"<RedisServer {self.url} {state}>"
