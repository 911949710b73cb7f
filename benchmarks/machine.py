"""What the run happens on, and CPU pinning that is the same for every library in a run.

On a small machine where a process lands changes a loopback round trip severalfold, so every
run is pinned, and the Redis family runs under two pinnings:

- ``same``: the server and every client process on one CPU. A loopback round trip is short
  (tens of microseconds) and whatever a library spends on the client side shows.
- ``split``: the server on one CPU, every client process on another. Round trips cost a few
  hundred microseconds (a cross-CPU wake-up each way) and hide client-side cost, but clients
  no longer compete with the server for a CPU.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = [
    "PINNING_NAMES",
    "CpuClock",
    "Pinning",
    "choose_pinnings",
    "cpu_ns",
    "library_versions",
    "load_average",
    "machine_facts",
    "pin_all_threads",
    "pin_self",
]

_LIBRARIES = (
    "lockkit",
    "redis",
    "hiredis",  # redis-py parses with it when installed: every redis row gets faster
    "python-redis-lock",
    "pottery",
    "filelock",
    "portalocker",
)


#: the pinnings a run can ask for, in the order they run
PINNING_NAMES = ("same", "split")


@dataclass(frozen=True)
class Pinning:
    """Which CPU the server and the clients run on (None: left to the scheduler)."""

    name: str
    server_cpu: int | None
    client_cpu: int | None
    note: str

    def describe(self, with_server: bool) -> str:
        """The header line: what was pinned where (the server only if one was started)."""
        if self.client_cpu is None or with_server:
            return self.note
        return f"every client process on CPU {self.client_cpu}"


def choose_pinnings(wanted: tuple[str, ...] = PINNING_NAMES) -> list[Pinning]:
    """The pinnings named in ``wanted`` that this machine allows, from the CPUs this process
    may use; a pinning that needs a second CPU is replaced by an unpinned note if there is
    none."""
    if not hasattr(os, "sched_setaffinity"):
        return [Pinning("none", None, None, "none: this platform has no sched_setaffinity")]
    cpus = sorted(os.sched_getaffinity(0))
    found: list[Pinning] = []
    for name in wanted:
        if name == "same":
            cpu = cpus[0]
            note = f"same CPU: redis-server (all threads) and every client process on CPU {cpu}"
            found.append(Pinning("same", cpu, cpu, note))
        elif len(cpus) >= 2:
            server, client = cpus[0], cpus[1]
            note = (
                f"split: redis-server (all threads) on CPU {server}; "
                f"every client process on CPU {client}"
            )
            found.append(Pinning("split", server, client, note))
        else:
            note = f"split: not possible, only CPU {cpus[0]} is available"
            found.append(Pinning("split", None, None, note))
    return found


def pin_self(cpu: int | None) -> None:
    """Pin the calling process to ``cpu`` (children inherit it); no-op for None."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def isolated(cpu: int | None, func: Callable[..., T], *args: Any) -> T:
    """Run ``func(*args)`` in a fresh spawned process pinned to ``cpu`` (None: not pinned)."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn, initializer=pin_self, initargs=(cpu,)) as pool:
        return pool.submit(func, *args).result()


def spin(seconds: float) -> None:
    """Keep the CPU busy for ``seconds``: a critical section's work."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


def pin_all_threads(pid: int, cpu: int | None) -> None:
    """Pin every thread of process ``pid`` to ``cpu``, like ``taskset -a -p -c CPU PID``."""
    if cpu is None:
        return
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {cpu})


def cpu_ns(pid: int) -> int:
    """CPU time every thread of ``pid`` has run, in nanoseconds (``/proc/PID/task/*/schedstat``:
    what it ran, not what it waited for a CPU on a loaded machine)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        # (a thread may end between the listing and the read)
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
            total += int(stat.read().split()[0])
    return total


class CpuClock:
    """CPU nanoseconds run by this process and (if given) a server process: read before and
    after a batch, the difference is what the batch cost in CPU, whatever else ran."""

    def __init__(self, server_pid: int | None = None) -> None:
        self.server_pid = server_pid

    def read(self) -> int:
        """This process's CPU time plus the server's."""
        server = cpu_ns(self.server_pid) if self.server_pid is not None else 0
        return time.process_time_ns() + server


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
