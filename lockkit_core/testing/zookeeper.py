"""Start real ZooKeeper servers on free loopback ports for tests: ``ZooKeeperServer``, and
``ZooKeeperEnsemble`` (three members on loopback).

Each member runs ``java`` directly on Debian's ``zookeeper`` package (``/usr/share/java``) with a
``zoo.cfg`` written to a temporary directory (its ``dataDir``), a small heap, the admin server
off and every four-letter word allowed, so readiness is checked by protocol (``ruok`` ->
``imok``, then ``srvr`` says it serves). A short ``tickTime`` lets tests use short sessions:
ZooKeeper grants sessions of 2 to 20 ticks.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .process import Closing, die_with_parent_prefix, free_port, spawn_logged, stop_process

__all__ = ["ZooKeeperEnsemble", "ZooKeeperServer", "find_zookeeper_classpath", "four_letter"]

_LOOPBACK = "127.0.0.1"
_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/zookeeper/zookeeper.jar")
_INSTALL_HINT = (
    "ZooKeeper is not installed; run scripts/test (it installs it), or install it yourself "
    "with: sudo apt-get install zookeeper"
)


def find_zookeeper_classpath() -> str:
    """The classpath of Debian's ZooKeeper server; a clear ``RuntimeError`` if it is missing."""
    for jar in _JARS:
        if os.path.exists(jar):
            return jar  # its manifest names the jars it needs
    raise RuntimeError(_INSTALL_HINT)


def four_letter(port: int, word: str, timeout: float = 1.0, host: str = _LOOPBACK) -> str:
    """Send a four-letter word (``ruok``, ``srvr``, ``mntr``) and return the reply; ``""`` if
    nothing answers."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(word.encode("ascii"))
            chunks = []
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


def _serving(port: int) -> str | None:
    """The member's mode (``standalone``, ``leader``, ``follower``) once it serves clients."""
    if four_letter(port, "ruok") != "imok":
        return None
    for line in four_letter(port, "srvr").splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip()
    return None


class _Member:
    """One ZooKeeper process: its directory, config and process."""

    def __init__(self, root: Path, myid: int, tick_ms: int) -> None:
        self.myid = myid
        self.dir = root / f"member-{myid}"
        (self.dir / "data").mkdir(parents=True)
        (self.dir / "data" / "myid").write_text(f"{myid}\n")
        self.port = free_port()
        self.peer_port = free_port()
        self.election_port = free_port()
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    def write_config(self, peers: list[_Member]) -> Path:
        lines = [
            f"tickTime={self.tick_ms}",
            "initLimit=20",
            "syncLimit=10",
            f"dataDir={self.dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={_LOOPBACK}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            "minSessionTimeout=" + str(2 * self.tick_ms),
            "maxSessionTimeout=" + str(60_000),
            "autopurge.purgeInterval=0",
            # Test servers do not fsync their log: a killed member keeps what reached the OS,
            # which is all a test on one machine needs, and writes cost 0.1 ms, not 10.
            "forceSync=no",
        ]
        if len(peers) > 1:
            lines.append("standaloneEnabled=false")
            lines += [f"server.{p.myid}={_LOOPBACK}:{p.peer_port}:{p.election_port}" for p in peers]
        cfg = self.dir / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        return cfg

    def spawn(self, classpath: str) -> None:
        args = [
            *die_with_parent_prefix(),
            shutil.which("java") or "/usr/bin/java",
            "-Xmx256m",
            "-Xms32m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.root.logger=WARN,CONSOLE",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            f"/etc/zookeeper/conf:{classpath}",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.dir / "zoo.cfg"),
        ]
        self.proc = spawn_logged(args, self.dir / "zookeeper.log", self.dir)
        self.paused = False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals, wait: float = 10.0) -> None:
        proc = self.proc
        if proc is None:
            return
        stop_process(proc, sig, wait, paused=self.paused)
        self.proc = None
        self.paused = False

    def log_tail(self) -> str:
        try:
            text = (self.dir / "zookeeper.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-20:])


class ZooKeeperEnsemble(Closing):
    """``size`` ZooKeeper members on loopback (1: a standalone server).

    ``hosts`` is the connect string, ``url`` the ``zookeeper://`` URL. ``leader()`` names the
    member that leads; ``kill(i)``, ``stop(i)``, ``start(i)``, ``pause(i)``/``resume(i)``
    act on one member (data survives: it stays in the member's ``dataDir``). Start it from a
    thread that lives as long as the servers should: on Linux they stop when it exits.
    """

    def __init__(self, size: int = 3, *, tick_ms: int = 200, startup_timeout: float = 60.0) -> None:
        self.classpath = find_zookeeper_classpath()
        self.tick_ms = tick_ms
        self.startup_timeout = startup_timeout
        self._tmp = tempfile.TemporaryDirectory(prefix="lockkit-zookeeper-")
        root = Path(self._tmp.name)
        self.members = [_Member(root, i + 1, tick_ms) for i in range(size)]
        for member in self.members:
            member.write_config(self.members)
        try:
            for member in self.members:
                member.spawn(self.classpath)
            self.wait_serving()
        except BaseException:
            self.close()
            raise

    @property
    def hosts(self) -> str:
        """``127.0.0.1:P1,127.0.0.1:P2,...``."""
        return ",".join(f"{_LOOPBACK}:{m.port}" for m in self.members)

    @property
    def url(self) -> str:
        """``zookeeper://127.0.0.1:P1,.../``."""
        return f"zookeeper://{self.hosts}/"

    @property
    def min_session_timeout(self) -> float:
        """The shortest session the members grant, in seconds (two ticks)."""
        return 2 * self.tick_ms / 1000.0

    def mode(self, index: int) -> str | None:
        """``leader``, ``follower`` or ``standalone`` while member ``index`` serves, else None."""
        member = self.members[index]
        return _serving(member.port) if member.running() and not member.paused else None

    def leader(self) -> int:
        """The index of the member that leads now (the only one, standalone)."""
        for i in range(len(self.members)):
            if self.mode(i) in {"leader", "standalone"}:
                return i
        raise RuntimeError("no ZooKeeper member leads right now")

    def wait_serving(self, timeout: float | None = None) -> None:
        """Wait until every running member serves clients and one leads."""
        deadline = time.monotonic() + (self.startup_timeout if timeout is None else timeout)
        while time.monotonic() < deadline:
            modes = [self.mode(i) for i, m in enumerate(self.members) if m.running()]
            if modes and all(modes) and any(m in {"leader", "standalone"} for m in modes):
                return
            for member in self.members:
                if member.proc is not None and member.proc.poll() is not None:
                    raise RuntimeError(
                        f"ZooKeeper member {member.myid} exited; its log says:\n"
                        + member.log_tail()
                    )
            time.sleep(0.1)
        raise RuntimeError(f"ZooKeeper did not start serving in time:\n{self.report()}")

    def report(self) -> str:
        """Each member's mode (None: it does not serve) and the end of its log: why no
        member leads, for a failure's message."""
        return "\n".join(
            f"member {m.myid} ({self.mode(i)!r}):\n{m.log_tail()}"
            for i, m in enumerate(self.members)
        )

    def kill(self, index: int) -> None:
        """SIGKILL member ``index``, as a crash would."""
        self.members[index].signal(signal.SIGKILL)

    def stop(self, index: int) -> None:
        """Stop member ``index`` (SIGTERM)."""
        self.members[index].signal(signal.SIGTERM)

    def start(self, index: int, wait: bool = True) -> None:
        """Start member ``index`` again on its ports, with its data."""
        member = self.members[index]
        if not member.running():
            member.spawn(self.classpath)
        if wait:
            self.wait_serving()

    def pause(self, index: int) -> None:
        """SIGSTOP member ``index``: its connections stay open but nothing answers."""
        member = self.members[index]
        if member.proc is None:
            raise RuntimeError(f"ZooKeeper member {member.myid} is not running")
        member.proc.send_signal(signal.SIGSTOP)
        member.paused = True

    def resume(self, index: int) -> None:
        """SIGCONT a paused member."""
        member = self.members[index]
        if member.proc is not None and member.paused:
            member.proc.send_signal(signal.SIGCONT)
        member.paused = False

    def close(self) -> None:
        """Stop every member and remove their directories."""
        for member in self.members:
            member.signal(signal.SIGTERM)
        self._tmp.cleanup()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.hosts}>"


class ZooKeeperServer(ZooKeeperEnsemble):
    """One standalone ZooKeeper server: ``kill()``, ``stop()``, ``start()``, ``restart()``
    (same port, same data), ``pause()``/``resume()``."""

    def __init__(self, *, tick_ms: int = 200, startup_timeout: float = 60.0) -> None:
        super().__init__(1, tick_ms=tick_ms, startup_timeout=startup_timeout)

    @property
    def port(self) -> int:
        """The client port."""
        return self.members[0].port

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        proc = self.members[0].proc
        return proc.pid if proc is not None else None

    def kill(self, index: int = 0) -> None:
        super().kill(index)

    def stop(self, index: int = 0) -> None:
        super().stop(index)

    def start(self, index: int = 0, wait: bool = True) -> None:
        super().start(index, wait)

    def pause(self, index: int = 0) -> None:
        super().pause(index)

    def resume(self, index: int = 0) -> None:
        super().resume(index)

    def restart(self) -> None:
        """Stop and start again on the same port; the data (and zxids) survive."""
        self.stop()
        self.start()
