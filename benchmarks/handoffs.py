"""Processes contending for one key on a database store, and the table row they make: grants
per second, hand-off latency (release to the next holder's return from acquire, counted when
that holder was already waiting), overlaps, and statements per grant from the server's own
counter. ``benchmarks.postgres_locks`` and ``benchmarks.mysql_locks`` both run it."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import time
from collections.abc import Callable
from typing import Any

from .machine import spin
from .stats import Section, percentile, section_stats

__all__ = ["Cycle", "MakeHandle", "contend"]

_SPAWN = multiprocessing.get_context("spawn")

Cycle = Callable[[], None]
#: makes one process's (acquire, release) from the store's URL; runs in the child, so it must
#: be picklable (a module-level function, or a ``functools.partial`` of one)
MakeHandle = Callable[[str], tuple[Cycle, Cycle]]


def _child(
    make: MakeHandle,
    url: str,
    seconds: float,
    hold: float,
    barrier: Any,
    results: Any,
) -> None:
    try:
        acquire, release = make(url)
        acquire()
        release()
        barrier.wait(60)
        start = time.monotonic()
        sections: list[Section] = []
        while (asked := time.monotonic()) < start + seconds:
            acquire()
            got = time.monotonic()
            spin(hold)
            done = time.monotonic()
            release()
            sections.append((asked, got, done, os.getpid()))
        results.put((start, sections, None))
    except BaseException as exc:
        barrier.abort()
        results.put((0.0, [], f"{type(exc).__name__}: {exc}"))


def contend(
    name: str,
    make: MakeHandle,
    url: str,
    *,
    processes: int,
    seconds: float,
    hold: float,
    statements: Callable[[], int],
) -> dict[str, Any]:
    """``processes`` spawned processes take the key in turn for ``seconds``, holding it
    ``hold`` seconds each time; ``statements()`` reads the server's statement counter (its
    own reading excluded), before and after."""
    before = statements()
    barrier = _SPAWN.Barrier(processes)
    results = _SPAWN.Queue()
    workers = [
        _SPAWN.Process(
            target=_child, args=(make, url, seconds, hold, barrier, results), daemon=True
        )
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    got = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
    errors = [error for _, _, error in got if error]
    if errors:
        return {"library": name, "error": errors[0]}
    sent = statements() - before
    sections = [s for _, found, _ in got for s in found]
    start = min(start for start, _, _ in got)
    stats = section_stats([(sections, start)], seconds, processes)
    ordered = sorted(sections, key=lambda s: s[1])
    handoffs = sorted(
        (b[1] - a[2]) * 1e3 for a, b in itertools.pairwise(ordered) if a[3] != b[3] and b[0] < a[2]
    )
    return {
        "library": name,
        "grants": stats.sections,
        "per_second": stats.per_second,
        "handoff_p50_ms": percentile(handoffs, 50),
        "handoff_p99_ms": percentile(handoffs, 99),
        "overlaps": stats.overlaps,
        # the set-up and warm-up statements of each process are included: a small overcount
        "statements_per_grant": sent / max(1, stats.sections),
    }
