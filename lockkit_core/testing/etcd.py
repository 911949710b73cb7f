"""Start real etcd servers on free loopback ports for tests: ``EtcdServer``, ``EtcdCluster``.

Each member runs Debian's ``etcd`` (3.4) with its data directory under a temporary directory,
client and peer ports picked free on 127.0.0.1, and is ready when a linearizable read through
the v3 JSON gateway answers (so a leader exists). Data survives ``restart()`` as it would on a
real deployment: revisions (and so fencing tokens) keep rising.
"""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .process import (
    Closing,
    die_with_parent_prefix,
    free_port,
    log_tail,
    spawn_logged,
    stop_process,
)

__all__ = ["EtcdCluster", "EtcdServer", "etcd_request", "find_etcd", "grpc_messages"]

_LOOPBACK = "127.0.0.1"
_INSTALL_HINT = (
    "etcd is not installed; run scripts/test (it installs it), or install it yourself with: "
    "sudo apt-get install etcd-server"
)


def find_etcd() -> str:
    """Path of the ``etcd`` executable; a clear ``RuntimeError`` if there is none."""
    found = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
    if found is None:
        raise RuntimeError(_INSTALL_HINT)
    return found


def etcd_request(
    port: int,
    path: str,
    body: dict[str, Any],
    timeout: float = 2.0,
    token: str | None = None,
) -> dict[str, Any]:
    """``POST /v3/<path>`` to the member on ``port``; the decoded answer (``OSError`` or
    ``RuntimeError`` when it fails)."""
    conn = http.client.HTTPConnection(_LOOPBACK, port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = token
        conn.request("POST", "/v3/" + path, json.dumps(body), headers)
        response = conn.getresponse()
        data = response.read()
    except http.client.HTTPException as exc:
        raise OSError(str(exc)) from exc
    finally:
        conn.close()
    if response.status != 200:
        raise RuntimeError(f"etcd {path} answered {response.status}: {data[:300]!r}")
    answer: dict[str, Any] = json.loads(data)
    return answer


def grpc_messages(port: int, timeout: float = 5.0) -> dict[str, int]:
    """The gRPC messages the member on ``port`` has received, by method, from its
    ``/metrics`` (``grpc_server_msg_received_total``): every request of the JSON gateway is
    one, and so is each message of a stream (a watch's create, a lease's keep-alive)."""
    conn = http.client.HTTPConnection(_LOOPBACK, port, timeout=timeout)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    except http.client.HTTPException as exc:
        raise OSError(str(exc)) from exc
    finally:
        conn.close()
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("grpc_server_msg_received_total{"):
            labels, _, value = line.partition("} ")
            method = labels.split('grpc_method="', 1)[1].split('"', 1)[0]
            counts[method] = counts.get(method, 0) + int(float(value))
    return counts


class _Member:
    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.client_port = free_port()
        self.peer_port = free_port()
        self.data_dir = root / name
        self.log_path = root / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def peer_url(self) -> str:
        return f"http://{_LOOPBACK}:{self.peer_port}"

    @property
    def client_url(self) -> str:
        return f"http://{_LOOPBACK}:{self.client_port}"


class EtcdCluster(Closing):
    """``size`` etcd members on loopback forming one cluster.

    ``url`` names every member (``etcd://127.0.0.1:P1,127.0.0.1:P2,...``). ``kill(i)``,
    ``pause(i)``/``resume(i)`` and ``restart(i)`` act on one member; ``leader()`` is the index
    of the current leader. Start it from a thread that lives as long as it should: on Linux
    the members are stopped when that thread exits.
    """

    def __init__(self, size: int = 3, *, startup_timeout: float = 30.0) -> None:
        self.executable = find_etcd()
        self.startup_timeout = startup_timeout
        self._tmp = tempfile.TemporaryDirectory(prefix="lockkit-etcd-")
        self.dir = Path(self._tmp.name)
        self.members = [_Member(f"m{i}", self.dir) for i in range(size)]
        self._initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        try:
            for index in range(size):
                self._spawn(index)
            self.wait_ready()
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        """``etcd://`` naming every member."""
        return "etcd://" + ",".join(f"{_LOOPBACK}:{m.client_port}" for m in self.members)

    def member_url(self, index: int) -> str:
        """``etcd://`` naming one member only."""
        return f"etcd://{_LOOPBACK}:{self.members[index].client_port}"

    def port(self, index: int = 0) -> int:
        """The client port of member ``index``."""
        return self.members[index].client_port

    def _spawn(self, index: int) -> None:
        m = self.members[index]
        args = [
            *die_with_parent_prefix(),
            self.executable,
            "--name",
            m.name,
            "--data-dir",
            str(m.data_dir),
            "--listen-client-urls",
            m.client_url,
            "--advertise-client-urls",
            m.client_url,
            "--listen-peer-urls",
            m.peer_url,
            "--initial-advertise-peer-urls",
            m.peer_url,
            "--initial-cluster",
            self._initial,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            self.dir.name,
            "--log-level",
            "warn",
        ]
        m.proc = spawn_logged(args, m.log_path, self.dir)
        m.paused = False

    def ready(self, index: int) -> bool:
        """True if member ``index`` serves a linearizable read (it sees a leader)."""
        try:
            etcd_request(self.port(index), "kv/range", {"key": base64.b64encode(b"-").decode()})
        except (OSError, RuntimeError, ValueError):
            return False
        return True

    def wait_ready(self, indexes: list[int] | None = None) -> None:
        """Wait until every running member (or those in ``indexes``) answers."""
        deadline = time.monotonic() + self.startup_timeout
        wanted = (
            indexes
            if indexes is not None
            else [i for i, m in enumerate(self.members) if m.proc is not None]
        )
        for index in wanted:
            while not self.ready(index):
                proc = self.members[index].proc
                if proc is None or proc.poll() is not None:
                    raise RuntimeError(
                        f"etcd member {index} exited:\n{log_tail(self.members[index].log_path)}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"etcd member {index} not ready:\n{log_tail(self.members[index].log_path)}"
                    )
                time.sleep(0.05)

    def leader(self) -> int:
        """The index of the member that leads now."""
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            for index, m in enumerate(self.members):
                if m.proc is None or m.paused:
                    continue
                try:
                    status = etcd_request(m.client_port, "maintenance/status", {})
                except (OSError, RuntimeError, ValueError):
                    continue
                if status.get("leader") and status["leader"] == status["header"]["member_id"]:
                    return index
            time.sleep(0.05)
        raise RuntimeError("no etcd member leads")

    def _signal(self, index: int, sig: signal.Signals, wait: float = 10.0) -> None:
        m = self.members[index]
        proc = m.proc
        if proc is None:
            return
        stop_process(proc, sig, wait, paused=m.paused)
        m.proc = None
        m.paused = False

    def kill(self, index: int = 0) -> None:
        """SIGKILL member ``index``, as a crash would."""
        self._signal(index, signal.SIGKILL)

    def stop(self, index: int = 0) -> None:
        """Stop member ``index`` (SIGTERM)."""
        self._signal(index, signal.SIGTERM)

    def start(self, index: int = 0) -> None:
        """Start a stopped member again from its data directory and wait until it answers."""
        if self.members[index].proc is None:
            self._spawn(index)
        self.wait_ready([index])

    def restart(self, index: int = 0) -> None:
        """Stop and start member ``index``; its data survives."""
        self.stop(index)
        self.start(index)

    def pause(self, index: int = 0) -> None:
        """SIGSTOP member ``index``: its connections stay open but nothing answers."""
        m = self.members[index]
        if m.proc is None:
            raise RuntimeError(f"etcd member {index} is not running")
        m.proc.send_signal(signal.SIGSTOP)
        m.paused = True

    def resume(self, index: int = 0) -> None:
        """SIGCONT a paused member."""
        m = self.members[index]
        if m.proc is not None and m.paused:
            m.proc.send_signal(signal.SIGCONT)
        m.paused = False

    def leases(self, index: int = 0) -> list[int]:
        """The ids of every lease the cluster holds (``/v3/lease/leases``)."""
        answer = etcd_request(self.port(index), "lease/leases", {})
        return [int(lease["ID"]) for lease in answer.get("leases") or []]

    def close(self) -> None:
        """Stop every member and remove the data."""
        for index in range(len(self.members)):
            self._signal(index, signal.SIGKILL)
        self._tmp.cleanup()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"


class EtcdServer(EtcdCluster):
    """One etcd member on free loopback ports: ``with EtcdServer() as s: LockKit(s.url)``."""

    def __init__(self, *, startup_timeout: float = 30.0) -> None:
        super().__init__(1, startup_timeout=startup_timeout)
