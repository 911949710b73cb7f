"""``python -m benchmarks.asyncio_cycle``: the uncontended asyncio cycle on Redis against the
blocking one, and both floors, in one pinned process.

Four series, each an acquire+release of a fresh key timed one cycle at a time, in rotating
batches (a burst of load elsewhere hits all alike): lockkit's blocking ``acquire()`` /
``release()``, lockkit's ``await aacquire()`` / ``arelease()`` (both ``reentrant=False``, as the
request guard takes them), and the floors: bare redis-py ``SET NX PX`` + compare-and-delete,
blocking and over ``redis.asyncio``. The budget: the asyncio cycle within 1.1x the blocking
one. Both floor ratios are printed too, to tell lockkit's cost from the driver's.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import redis
import redis.asyncio

from lockkit_core import LockKit

from .machine import PINNING_NAMES, choose_pinnings, pin_self
from .redis_floor import _RELEASE
from .servers import redis_server
from .stats import percentile

__all__ = ["ASYNCIO", "BLOCKING", "BUDGET", "Row", "measure"]

#: the asyncio cycle may cost at most this much of the blocking one
BUDGET = 1.1

FLOOR = "redis-py floor (SET NX PX + CAD)"
AFLOOR = "redis.asyncio floor"
BLOCKING = "lockkit acquire/release"
ASYNCIO = "lockkit aacquire/arelease"

_numbers = itertools.count(1)


@dataclass(frozen=True)
class Row:
    """One series: microseconds per cycle."""

    name: str
    p25: float
    p50: float
    p75: float
    p99: float


Blocking = Callable[[str], object]
Coroutine = Callable[[str], Awaitable[None]]


def _series(url: str) -> dict[str, Blocking | Coroutine]:
    """The four cycles by name: two blocking functions, two coroutine functions."""
    client = redis.Redis.from_url(url)
    release = client.register_script(_RELEASE)
    aclient = redis.asyncio.Redis.from_url(url)
    arelease = aclient.register_script(_RELEASE)
    kit = LockKit(url, namespace="bench", ttl=30.0)

    def floor(key: str) -> None:
        token = secrets.token_hex(16)
        if not client.set(key, token, nx=True, px=30_000) or release([key], [token]) != 1:
            raise RuntimeError(f"floor: {key} was taken")

    async def afloor(key: str) -> None:
        token = secrets.token_hex(16)
        taken = await aclient.set(key, token, nx=True, px=30_000)
        if not taken or await arelease([key], [token]) != 1:
            raise RuntimeError(f"asyncio floor: {key} was taken")

    def blocking(key: str) -> None:
        lock = kit.lock(key, reentrant=False)
        if not lock.acquire(timeout=0):
            raise RuntimeError(f"lockkit: {key} was taken")
        lock.release()

    async def asynchronous(key: str) -> None:
        lock = kit.lock(key, reentrant=False)
        if not await lock.aacquire(timeout=0):
            raise RuntimeError(f"lockkit asyncio: {key} was taken")
        await lock.arelease()

    return {
        FLOOR: floor,
        AFLOOR: afloor,
        BLOCKING: blocking,
        ASYNCIO: asynchronous,
    }


def _batch(cycle: Blocking, cycles: int) -> list[float]:
    keys = [f"cycle:{next(_numbers)}" for _ in range(cycles)]
    gc.collect()
    clock = time.perf_counter_ns
    took = []
    for key in keys:
        started = clock()
        cycle(key)
        took.append((clock() - started) / 1000.0)
    return took


def _timed_on_loop(loop: asyncio.AbstractEventLoop, cycle: Coroutine, cycles: int) -> list[float]:
    """Cycles timed inside one task: the loop's own start and stop are not the cycle's."""

    async def run() -> list[float]:
        keys = [f"cycle:{next(_numbers)}" for _ in range(cycles)]
        gc.collect()
        clock = time.perf_counter_ns
        took = []
        for key in keys:
            started = clock()
            await cycle(key)
            took.append((clock() - started) / 1000.0)
        return took

    return loop.run_until_complete(run())


def measure(url: str, cycles: int, rounds: int) -> list[Row]:
    """``rounds`` rotating batches of ``cycles`` cycles of each series."""
    loop = asyncio.new_event_loop()
    try:
        series = _series(url)
        times: dict[str, list[float]] = {name: [] for name in series}
        names = list(series)
        for i in range(rounds + 1):  # the first round warms up: connections, scripts
            for name in names[i % len(names) :] + names[: i % len(names)]:
                cycle = series[name]
                if asyncio.iscoroutinefunction(cycle):
                    took = _timed_on_loop(loop, cycle, cycles)
                else:
                    took = _batch(cycle, cycles)
                if i:
                    times[name] += took
    finally:
        loop.close()
    rows = []
    for name, took in times.items():
        ordered = sorted(took)
        q = statistics.quantiles(ordered, n=4)
        rows.append(Row(name, q[0], q[1], q[2], percentile(ordered, 99)))
    return rows


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.asyncio_cycle", description=__doc__)
    parser.add_argument("--cycles", type=int, default=300, help="cycles per batch")
    parser.add_argument("--rounds", type=int, default=12, help="batches per series")
    parser.add_argument("--pinning", choices=(*PINNING_NAMES, "both"), default="both")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Print one table per pinning; 1 if the asyncio cycle is over budget in any."""
    args = _parse(argv)
    wanted = PINNING_NAMES if args.pinning == "both" else (args.pinning,)
    over = False
    for pinning in choose_pinnings(wanted):
        with redis_server(pinning.server_cpu) as server:
            pin_self(pinning.client_cpu)
            rows = measure(server.url, args.cycles, args.rounds)
        p50 = {row.name: row.p50 for row in rows}
        print(f"\n{args.rounds} x {args.cycles} cycles per series; {pinning.note}")
        print(f"{'microseconds per cycle':36} {'p25':>8} {'p50':>8} {'p75':>8} {'p99':>8}")
        for row in rows:
            print(f"{row.name:36} {row.p25:8.1f} {row.p50:8.1f} {row.p75:8.1f} {row.p99:8.1f}")
        ratio = p50[ASYNCIO] / p50[BLOCKING]
        floors = p50[AFLOOR] / p50[FLOOR]
        print(
            f"asyncio / blocking, p50: lockkit {ratio:.2f}x (budget {BUDGET}x); "
            f"the floors {floors:.2f}x"
        )
        over = over or ratio > BUDGET
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
