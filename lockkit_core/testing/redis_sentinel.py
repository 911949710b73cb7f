"""A Redis Sentinel deployment for tests: a master, a replica and three sentinels
(``redis-server --sentinel``), all on free loopback ports.

``with SentinelDeployment() as dep: LockKit(dep.url)``. :meth:`~SentinelDeployment.kill_master`
SIGKILLs the current master as a crash would; :meth:`~SentinelDeployment.wait_failover` waits
for the sentinels to promote the replica; :meth:`~SentinelDeployment.heal` brings the dead
server back as a replica of the new master, ready for the next failover. The sentinels notice
a dead master after ``down_after`` seconds (1 s here; production uses 5-30 s).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .process import Closing, spawn_logged, stop_process
from .servers import RedisServer, _command, find_redis_server, free_port, redis_ping

__all__ = ["SentinelDeployment"]

_HOST = "127.0.0.1"
#: a replica's full sync starts at once (the default waits 5 s for more replicas to join)
_FAST_SYNC = ["--repl-diskless-sync-delay", "0"]


def _replica_of(master: RedisServer) -> list[str]:
    return ["--replicaof", _HOST, str(master.port)]


class SentinelDeployment(Closing):
    """Master + replica + three sentinels watching ``service`` (see the module docstring)."""

    service = "mymaster"

    def __init__(self, *, down_after: float = 1.0, startup_timeout: float = 15.0) -> None:
        self.down_after = down_after
        self._tmp = tempfile.TemporaryDirectory(prefix="lockkit-sentinel-")
        self.dir = Path(self._tmp.name)
        self.servers: list[RedisServer] = []
        self.sentinel_ports: list[int] = []
        self._sentinels: list[subprocess.Popen[bytes]] = []
        try:
            first = RedisServer(extra_args=_FAST_SYNC)
            self.servers.append(first)
            self.servers.append(RedisServer(extra_args=[*_FAST_SYNC, *_replica_of(first)]))
            self._wait_replicated(first, time.monotonic() + startup_timeout)
            for n in range(3):
                self._start_sentinel(n, first.port, time.monotonic() + startup_timeout)
            self._wait_sentinels_see_replica(time.monotonic() + startup_timeout)
        except BaseException:
            self.close()
            raise

    # -- addresses ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster/0``."""
        hosts = ",".join(f"{_HOST}:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    def master_port(self) -> int | None:
        """The master's port as the first sentinel that answers says."""
        for port in self.sentinel_ports:
            try:
                reply = _sentinel_lines(port, "SENTINEL", "get-master-addr-by-name", self.service)
            except OSError:
                continue
            if len(reply) == 2:
                return int(reply[1])
        return None

    def master(self) -> RedisServer:
        port = self.master_port()
        for server in self.servers:
            if server.port == port:
                return server
        raise RuntimeError(f"no server of ours is the master (the sentinels say {port})")

    def replica(self) -> RedisServer:
        master = self.master()
        return next(s for s in self.servers if s is not master)

    # -- faults -------------------------------------------------------------------------------

    def kill_master(self) -> RedisServer:
        """SIGKILL the current master; returns it (dead)."""
        master = self.master()
        master.kill()
        return master

    def wait_failover(self, old_port: int, timeout: float = 20.0) -> float:
        """Wait until every sentinel names a master other than ``old_port`` and it answers as
        a master; returns the seconds waited."""
        start = time.monotonic()
        deadline = start + timeout
        while time.monotonic() < deadline:
            ports = set()
            for port in self.sentinel_ports:
                reply = _sentinel_lines(port, "SENTINEL", "get-master-addr-by-name", self.service)
                ports.add(int(reply[1]) if len(reply) == 2 else None)
            if len(ports) == 1 and old_port not in ports and None not in ports:
                (new,) = ports
                assert new is not None
                if b"role:master" in _command(new, "INFO", "replication"):
                    return time.monotonic() - start
            time.sleep(0.05)
        raise RuntimeError(f"the sentinels did not fail over from port {old_port} in {timeout} s")

    def heal(self, timeout: float = 20.0) -> None:
        """Start every dead server again as a replica of the current master, and wait until
        it is replicating and every sentinel sees it (so the next failover can happen)."""
        deadline = time.monotonic() + timeout
        master = self.master()
        for server in self.servers:
            if not server.running():
                server.extra_args = [*_FAST_SYNC, *_replica_of(master)]
                server.restart()
        self._wait_replicated(master, deadline)
        self._wait_sentinels_see_replica(deadline)

    # -- start-up -----------------------------------------------------------------------------

    def _wait_replicated(self, master: RedisServer, deadline: float) -> None:
        while time.monotonic() < deadline:
            info = _command(master.port, "INFO", "replication")
            if b"connected_slaves:1" in info and b"state=online" in info:
                return
            time.sleep(0.05)
        raise RuntimeError(f"the replica of port {master.port} did not come online")

    def _start_sentinel(self, n: int, master_port: int, deadline: float) -> None:
        port = free_port()
        conf = self.dir / f"sentinel-{n}.conf"
        ms = max(100, int(self.down_after * 1000))
        conf.write_text(
            f"port {port}\nbind {_HOST}\ndir {self.dir}\n"
            f"sentinel monitor {self.service} {_HOST} {master_port} 2\n"
            f"sentinel down-after-milliseconds {self.service} {ms}\n"
            f"sentinel failover-timeout {self.service} {max(2000, 3 * ms)}\n"
            f"sentinel parallel-syncs {self.service} 1\n"
        )
        args = [find_redis_server(), str(conf), "--sentinel", "--logfile", ""]
        proc = spawn_logged(args, self.dir / f"sentinel-{n}.log", self.dir)
        self._sentinels.append(proc)
        self.sentinel_ports.append(port)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"sentinel {n} exited; see {self.dir}/sentinel-{n}.log")
            if redis_ping(port):
                return
            time.sleep(0.02)
        raise RuntimeError(f"sentinel {n} did not answer on port {port}")

    def _wait_sentinels_see_replica(self, deadline: float) -> None:
        """Until every sentinel knows a healthy replica and its two fellow sentinels: a
        failover needs both."""
        while time.monotonic() < deadline:
            ready = 0
            for port in self.sentinel_ports:
                master = _sentinel_fields(port, "SENTINEL", "master", self.service)
                replicas = _sentinel_lines(port, "SENTINEL", "replicas", self.service)
                # one "flags" value per replica: "slave" alone when it is healthy
                flags = [replicas[i + 1] for i, v in enumerate(replicas[:-1]) if v == b"flags"]
                healthy = bool(flags) and all(f == b"slave" for f in flags)
                if healthy and master.get(b"num-other-sentinels") == b"2":
                    ready += 1
            if ready == len(self.sentinel_ports):
                return
            time.sleep(0.05)
        raise RuntimeError("the sentinels did not agree on the master, replica and each other")

    def close(self) -> None:
        for proc in self._sentinels:
            stop_process(proc, signal.SIGTERM, 5.0)
        for server in self.servers:
            server.close()
        self._tmp.cleanup()


def _sentinel_lines(port: int, *words: str) -> list[bytes]:
    """A command's reply flattened to its bulk strings (enough for SENTINEL's replies)."""
    request = f"*{len(words)}\r\n".encode() + b"".join(
        f"${len(w.encode())}\r\n{w}\r\n".encode() for w in words
    )
    with socket.create_connection((_HOST, port), timeout=2.0) as sock:
        sock.sendall(request)
        data = b""
        sock.settimeout(0.2)
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
            if _complete(data):
                break
    lines = data.split(b"\r\n")
    return [lines[i + 1] for i, line in enumerate(lines[:-1]) if line.startswith(b"$")]


def _complete(data: bytes) -> bool:
    """Whether ``data`` holds one whole RESP2 reply (arrays of bulk strings, nested)."""
    pos = 0

    def one() -> bool:
        nonlocal pos
        end = data.find(b"\r\n", pos)
        if end < 0:
            return False
        head = data[pos:end]
        pos = end + 2
        if head[:1] == b"*":
            return all(one() for _ in range(max(0, int(head[1:]))))
        if head[:1] == b"$":
            size = int(head[1:])
            if size < 0:
                return True
            if len(data) < pos + size + 2:
                return False
            pos += size + 2
        return True

    try:
        return one()
    except ValueError:
        return False


def _sentinel_fields(port: int, *words: str) -> dict[bytes, bytes]:
    lines = _sentinel_lines(port, *words)
    return dict(zip(lines[::2], lines[1::2], strict=False))
