"""What the run happens on, and CPU pinning that is the same for every library in a run.

On a small machine where a process lands changes a loopback round trip severalfold, so the
Redis server gets one CPU and every client process (benchmark workers and the coordinator)
another one.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from importlib import metadata

__all__ = [
    "Pinning",
    "choose_pinning",
    "library_versions",
    "load_average",
    "machine_facts",
    "pin_all_threads",
    "pin_self",
]

_LIBRARIES = ("lockkit", "redis", "python-redis-lock", "pottery", "filelock", "portalocker")


@dataclass(frozen=True)
class Pinning:
    """Which CPU the server and the clients run on (None: left to the scheduler)."""

    server_cpu: int | None
    client_cpu: int | None
    note: str

    def describe(self, with_server: bool) -> str:
        """The header line: what was pinned where (the server only if one was started)."""
        if self.client_cpu is None or with_server:
            return self.note
        return f"every client process on CPU {self.client_cpu}"


def choose_pinning() -> Pinning:
    """Server on the first CPU this process may use, clients on the second; say so if not."""
    if not hasattr(os, "sched_setaffinity"):
        return Pinning(None, None, "none: this platform has no sched_setaffinity")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return Pinning(
            None, None, f"none: only CPU {cpus[0]} is available, server and clients share it"
        )
    server, client = cpus[0], cpus[1]
    return Pinning(
        server,
        client,
        f"redis-server (all threads) on CPU {server}; every client process on CPU {client}",
    )


def pin_self(cpu: int | None) -> None:
    """Pin the calling process to ``cpu`` (children inherit it); no-op for None."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def pin_all_threads(pid: int, cpu: int | None) -> None:
    """Pin every thread of process ``pid`` to ``cpu``, like ``taskset -a -p -c CPU PID``."""
    if cpu is None:
        return
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {cpu})


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_facts() -> dict[str, str]:
    """nproc, CPU model, OS and Python, as shown in the header."""
    return {
        "nproc": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
    }


def load_average() -> float | None:
    """The 1-minute load average (other work on the machine skews every number)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def library_versions() -> dict[str, str]:
    """Installed versions of lockkit and the peer libraries."""
    versions = {}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
