"""Small, dependency-free statistics over latency samples and critical-section records."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Section", "SectionStats", "percentile", "section_stats"]


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of already sorted values, nearest rank."""
    if not ordered:
        return math.nan
    rank = math.ceil(q / 100.0 * len(ordered))
    return ordered[min(len(ordered), max(1, rank)) - 1]


#: one critical section: (started to acquire, acquired, about to release, pid), monotonic s
Section = tuple[float, float, float, int]


@dataclass(frozen=True)
class SectionStats:
    """What the contention scenario reports for one library."""

    sections: int
    per_second: float
    wait_p50: float
    wait_p99: float
    wait_max: float
    handoff_share: float
    overlaps: int
    per_process_min: int
    per_process_max: int


def section_stats(
    runs: Sequence[tuple[Sequence[Section], float]], duration: float, processes: int
) -> SectionStats:
    """Measure the sections of one or more runs, each given as (its sections, its start).

    Within a run, every process's sections are merged by acquisition time. Throughput counts
    the sections finished inside ``[start, start + duration]`` of each run; waits are pooled
    over the runs; ``per_process_min``/``max`` add up each run's fewest and most. A section
    *overlaps* if it was acquired before an earlier-acquired one of its run was released:
    ``time.monotonic`` is one clock for every process on Linux, so this is a real check of
    mutual exclusion, not an estimate.
    """
    finished = handoffs = pairs = overlaps = fewest = most = total = 0
    waits: list[float] = []
    for sections, start in runs:
        ordered = sorted(sections, key=lambda s: s[1])
        total += len(ordered)
        finished += sum(1 for s in ordered if s[2] <= start + duration)
        waits += (s[1] - s[0] for s in ordered)
        handoffs += sum(1 for a, b in itertools.pairwise(ordered) if a[3] != b[3])
        pairs += max(0, len(ordered) - 1)
        held_until = -math.inf
        for _, acquired, released, _ in ordered:
            if acquired < held_until:
                overlaps += 1
            held_until = max(held_until, released)
        counts: dict[int, int] = {}
        for s in ordered:
            counts[s[3]] = counts.get(s[3], 0) + 1
        per_process = list(counts.values()) + [0] * (processes - len(counts))
        fewest += min(per_process, default=0)
        most += max(per_process, default=0)
    waits.sort()
    return SectionStats(
        sections=total,
        per_second=finished / (duration * len(runs)) if runs else math.nan,
        wait_p50=percentile(waits, 50),
        wait_p99=percentile(waits, 99),
        wait_max=waits[-1] if waits else math.nan,
        handoff_share=handoffs / pairs if pairs else math.nan,
        overlaps=overlaps,
        per_process_min=fewest,
        per_process_max=most,
    )
