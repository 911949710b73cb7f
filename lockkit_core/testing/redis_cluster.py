"""A Redis Cluster for tests: three masters and three replicas on free loopback ports, joined by
``redis-cli --cluster create``.

``with RedisClusterDeployment() as cluster: LockKit(cluster.url)``. :meth:`kill_master` SIGKILLs
the master of a slot; its replica takes over after ``node_timeout`` (1 s here) and an election;
:meth:`heal` starts the dead node again (it rejoins as a replica of its successor).
"""

from __future__ import annotations

import shutil
import subprocess
import time

from .process import Closing
from .servers import RedisServer, _command

__all__ = ["RedisClusterDeployment"]

_HOST = "127.0.0.1"


class RedisClusterDeployment(Closing):
    """Three masters, one replica each (see the module docstring)."""

    def __init__(self, *, node_timeout: float = 1.0, startup_timeout: float = 30.0) -> None:
        self.node_timeout = node_timeout
        self.servers: list[RedisServer] = []
        deadline = time.monotonic() + startup_timeout
        try:
            for _ in range(6):
                # nodes.conf is relative to the server's --dir: a restart rejoins as this node
                self.servers.append(
                    RedisServer(
                        extra_args=[
                            "--cluster-enabled", "yes",
                            "--cluster-config-file", "nodes.conf",
                            "--cluster-node-timeout", str(int(node_timeout * 1000)),
                            "--repl-diskless-sync-delay", "0",
                        ]
                    )
                )  # fmt: skip
            cli = shutil.which("redis-cli")
            if cli is None:
                raise RuntimeError("redis-cli is not installed: sudo apt-get install redis-tools")
            subprocess.run(
                [cli, "--cluster", "create", *self.addresses(), "--cluster-replicas", "1",
                 "--cluster-yes"],
                check=True, capture_output=True, timeout=startup_timeout,
            )  # fmt: skip
            self.wait_healthy(deadline - time.monotonic())
        except BaseException:
            self.close()
            raise

    def addresses(self) -> list[str]:
        return [f"{_HOST}:{server.port}" for server in self.servers]

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/`` (three seeds)."""
        return f"redis+cluster://{','.join(self.addresses()[:3])}/"

    def masters(self) -> list[RedisServer]:
        found = []
        for server in self.servers:
            if server.running() and b"master" in _info(server.port, "replication", "role"):
                found.append(server)
        return found

    def master_of(self, key: str) -> RedisServer:
        """The running master that serves ``key``'s slot."""
        slot = int(_command(self.masters()[0].port, "CLUSTER", "KEYSLOT", key)[1:])
        for server in self.masters():
            if _slot_owner(server.port, slot) == _command(server.port, "CLUSTER", "MYID"):
                return server
        raise RuntimeError(f"no running master serves slot {slot}")

    def kill_master(self, key: str) -> RedisServer:
        """SIGKILL the master of ``key``'s slot; returns it (dead)."""
        master = self.master_of(key)
        master.kill()
        return master

    def wait_healthy(self, timeout: float = 30.0) -> float:
        """Until every running node says ``cluster_state:ok`` and three masters each have
        an online replica; returns the seconds waited."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            running = [s for s in self.servers if s.running()]
            ok = all(b"cluster_state:ok" in _command(s.port, "CLUSTER", "INFO") for s in running)
            masters = self.masters()
            if ok and len(masters) == 3 and len(running) == 6:
                replicated = all(
                    b"state=online" in _command(m.port, "INFO", "replication") for m in masters
                )
                if replicated:
                    return time.monotonic() - start
            time.sleep(0.05)
        raise RuntimeError(f"the cluster was not healthy within {timeout} s")

    def wait_failover(self, dead: RedisServer, timeout: float = 20.0) -> float:
        """Until the cluster is ok again without ``dead``; returns the seconds waited."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            running = [s for s in self.servers if s.running() and s is not dead]
            if len(self.masters()) == 3 and all(
                b"cluster_state:ok" in _command(s.port, "CLUSTER", "INFO") for s in running
            ):
                return time.monotonic() - start
            time.sleep(0.05)
        raise RuntimeError(f"the cluster did not fail over within {timeout} s")

    def heal(self, timeout: float = 30.0) -> None:
        """Start dead nodes again (their nodes.conf makes them rejoin) and wait until healthy."""
        for server in self.servers:
            if not server.running():
                server.start()
        self.wait_healthy(timeout)

    def close(self) -> None:
        for server in self.servers:
            server.close()


def _info(port: int, section: str, field: str) -> bytes:
    for line in _command(port, "INFO", section).splitlines():
        if line.startswith(field.encode() + b":"):
            return line.partition(b":")[2]
    return b""


def _slot_owner(port: int, slot: int) -> bytes:
    """The node id that ``port``'s node says serves ``slot`` (from CLUSTER NODES)."""
    for line in _command(port, "CLUSTER", "NODES").decode().splitlines():
        fields = line.split()
        if len(fields) < 9 or "master" not in fields[2] or "fail" in fields[2]:
            continue
        for part in fields[8:]:
            low, _, high = part.partition("-")
            if low.isdigit() and int(low) <= slot <= int(high or low):
                return fields[0].encode()
    return b""
