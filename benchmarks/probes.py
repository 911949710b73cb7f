"""Timing probes that take turns: each row's cycles are cut into slices and the rows run
slice by slice, so other work on the machine falls on every row alike; each slice's client
CPU time (all of this process's threads: a library's helper threads count) is taken too,
which a loaded machine inflates far less than wall time; round trips to
PostgreSQL are counted on one more, traced, cycle (libpq's trace costs a write per message,
so it is kept out of the timings)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .pg_trace import traced_connection
from .stats import percentile

__all__ = ["ROUNDS", "Probe", "measure", "whole"]

Cycle = Callable[[], None]

#: how many slices each row's cycles are cut into: the rows take turns slice by slice, so
#: other work on the machine falls on every row alike
ROUNDS = 10


def _time(cycle: Cycle, cycles: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        cycle()
    samples = []
    for _ in range(cycles):
        started = time.perf_counter()
        cycle()
        samples.append(time.perf_counter() - started)
    return sorted(s * 1e6 for s in samples)


def _row(name: str, micros: list[float], cpu: list[float], trips: float) -> dict[str, Any]:
    return {
        "library": name,
        "mean_us": statistics.fmean(micros),
        "p50_us": percentile(micros, 50),
        "p99_us": percentile(micros, 99),
        "cpu_us": statistics.median(cpu) * 1e6,
        "round_trips": trips,
    }


@dataclass
class Probe:
    """One row: ``run()`` does one cycle and returns the seconds of the part it times; the
    round trips of a cycle are counted on ``conn``, the connection it runs on."""

    name: str
    run: Callable[[], float]
    conn: Any
    samples: list[float] = field(default_factory=list)
    #: client CPU seconds per cycle, one per slice
    cpu: list[float] = field(default_factory=list)


def whole(cycle: Cycle) -> Callable[[], float]:
    """A probe's ``run`` that times all of ``cycle``."""

    def run() -> float:
        started = time.perf_counter()
        cycle()
        return time.perf_counter() - started

    return run


def _count_trips(probe: Probe) -> int:
    with traced_connection(probe.conn) as trips:
        probe.run()
        probe.conn.pgconn.untrace()  # flushes the trace file before it is read
        return trips.count()


def measure(probes: list[Probe], cycles: int, warmup: int) -> list[dict[str, Any]]:
    """Time every probe untraced (libpq's trace costs a write per message), in turns of
    ``cycles / ROUNDS`` (see :data:`ROUNDS`), then count one more cycle's round trips. The
    client CPU time of a row is the median of its slices'."""
    for probe in probes:
        for _ in range(warmup):
            probe.run()
    per_slice = cycles // ROUNDS
    for _ in range(ROUNDS):
        for probe in probes:
            started = time.process_time()
            probe.samples += [probe.run() for _ in range(per_slice)]
            probe.cpu.append((time.process_time() - started) / per_slice)
    return [
        _row(probe.name, sorted(x * 1e6 for x in probe.samples), probe.cpu, _count_trips(probe))
        for probe in probes
    ]
