"""The floor a locked request is held to: one bare redis-py ``SET key token NX PX ttl`` and
one compare-and-delete script (``GET`` = token then ``DEL``), the least a correct
token-owned lock can send. Measured in the same process, pinning and run as the requests it
is compared with, one cycle timed at a time.

Two ways, both reported: ``batch`` times cycles back to back (a tight loop: the driver's code
and data stay in the CPU's caches), and ``cycle`` is what a view calls to lock by hand, so the
benchmarks time it inside a request of the bare app, where the framework's own work between
two cycles evicts those caches, as it does for a locked route's lock. On a loaded two-core
machine the second costs some 25-45 us more than the first per cycle, for redis-py and
lockkit alike (measured: ``benchmarks.flask_inprocess``).
"""

from __future__ import annotations

import gc
import itertools
import secrets
import time

import redis

from .machine import CpuClock

__all__ = ["Floor"]

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class Floor:
    """``batch(n)``: the times (microseconds) of ``n`` acquire-release cycles on fresh keys."""

    def __init__(self, url: str, server_pid: int | None = None) -> None:
        self.clock = CpuClock(server_pid)
        self.client = redis.Redis.from_url(url)
        self.release = self.client.register_script(_RELEASE)
        self.numbers = itertools.count(1)
        self.batch(50)  # connect, load the script

    def batch(self, requests: int, cpu: list[float] | None = None) -> list[float]:
        """The cycles' wall times; ``cpu`` gets their CPU time per cycle (this process, and
        redis-server if :attr:`clock` knows its pid)."""
        keys = [f"floor:{next(self.numbers)}" for _ in range(requests)]
        gc.collect()
        took = []
        clock = time.perf_counter_ns
        cycle = self.cycle
        used = self.clock.read()
        for key in keys:
            started = clock()
            cycle(key)
            took.append((clock() - started) / 1000.0)
        if cpu is not None:
            cpu.append((self.clock.read() - used) / requests / 1000.0)
        return took

    def cycle(self, key: str) -> None:
        """Take ``key`` and give it back, as a view locking by hand would."""
        token = secrets.token_hex(16)  # as every lock library makes one per acquisition
        if not self.client.set(key, token, nx=True, px=30_000):
            raise RuntimeError(f"{key} was taken")
        if self.release(keys=[key], args=[token]) != 1:
            raise RuntimeError(f"{key} was not released")

    def close(self) -> None:
        self.client.close()
