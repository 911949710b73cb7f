"""The three scenarios. Each measurement runs in fresh "spawn" processes pinned to the client
CPU, so no library inherits another's threads, connections or garbage.

1. ``uncontended``: acquire+release of one key in one process, timed per cycle; each library
   shares its processes with the family's baseline only, the two taking turns in blocks.
2. ``contention``: N processes take turns on one key, each holding it ``hold`` seconds
   (a busy-wait, so the holder really occupies its CPU).
3. ``many_keys``: acquire+release cycles spread over many keys, a fresh handle per cycle.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from .contenders import by_name
from .machine import isolated, pin_self, spin
from .stats import Section, percentile, section_stats

__all__ = ["FreshTarget", "Settings", "contention", "many_keys", "uncontended"]

T = TypeVar("T")
Row = dict[str, Any]
#: returns a fresh target (a flushed redis URL, or a new empty directory) for one run
FreshTarget = Callable[[], str]

_SPAWN = multiprocessing.get_context("spawn")
#: startup allowance for N spawned workers importing their library on one CPU
_STARTUP_LIMIT = 120.0


@dataclass(frozen=True)
class Settings:
    """Sizes of one run."""

    cycles: int = 3000
    rounds: int = 3
    warmup: int = 200
    processes: int = 8
    seconds: float = 3.0
    #: contention runs per library, taking turns with the other libraries
    contention_rounds: int = 2
    hold: float = 0.0005
    many_cycles: int = 5000
    many_keys: int = 1000
    #: uncontended cycles a library runs before the next one takes its turn
    block: int = 100

    def as_dict(self) -> dict[str, Any]:
        """For the JSON report."""
        return asdict(self)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:160]


# -- 1. uncontended -----------------------------------------------------------------------------


def _uncontended_child(
    names: Sequence[str], target: str, cycles: int, warmup: int, block: int
) -> dict[str, list[int]]:
    """Time ``cycles`` cycles per library, the libraries taking turns in blocks of ``block``
    so that whatever slows this process down (the machine, the CPU it was given) slows
    them alike."""
    handles = [by_name(name).open(target)(f"bench:uncontended:{i}") for i, name in enumerate(names)]
    for acquire, release in handles:
        for _ in range(warmup):
            if not acquire():
                raise RuntimeError("acquire returned False on a free key")
            release()
    clock = time.perf_counter_ns
    samples: list[list[int]] = [[] for _ in names]
    done = 0
    while done < cycles:
        count = min(block, cycles - done)
        turn = list(zip(handles, samples, strict=True))
        for (acquire, release), out in turn if done // block % 2 == 0 else reversed(turn):
            for _ in range(count):
                started = clock()
                if not acquire():
                    raise RuntimeError("acquire returned False on a free key")
                release()
                out.append(clock() - started)
        done += count
    return dict(zip(names, samples, strict=True))


def _latency(name: str, samples: Sequence[int]) -> Row:
    micros = sorted(ns / 1000.0 for ns in samples)
    return {
        "library": name,
        "cycles": len(micros),
        "mean_us": sum(micros) / len(micros),
        "p50_us": percentile(micros, 50),
        "p99_us": percentile(micros, 99),
    }


def uncontended(
    names: Sequence[str],
    baseline: str,
    fresh_target: FreshTarget,
    settings: Settings,
    cpu: int | None,
) -> list[Row]:
    """Per-cycle latency. Each library runs paired with ``baseline`` in the same fresh
    process, taking turns in blocks, so its ratio to the baseline is measured under the
    same conditions; rounds alternate the order of libraries."""
    per_round = max(1, math.ceil(settings.cycles / settings.rounds))
    others = [name for name in names if name != baseline]
    partner = [baseline] if baseline in names else []
    ours: dict[str, list[int]] = {name: [] for name in names}
    paired: dict[str, list[int]] = {name: [] for name in others}
    errors: dict[str, str] = {}
    for round_no in range(settings.rounds):
        order = others if round_no % 2 == 0 else others[::-1]
        for name in order or partner:
            if name in errors:
                continue
            _progress(f"uncontended  round {round_no + 1}/{settings.rounds}  {name}")
            group = [name, *partner] if name != baseline else partner
            try:
                found = isolated(
                    cpu,
                    _uncontended_child,
                    group,
                    fresh_target(),
                    per_round,
                    settings.warmup,
                    settings.block,
                )
            except Exception as exc:
                errors[name] = _describe(exc)
                continue
            ours[name] += found[name]
            if partner and name != baseline:
                ours[baseline] += found[baseline]
                paired[name] += found[baseline]
    rows: list[Row] = []
    for name in names:
        if name in errors or not ours[name]:
            rows.append({"library": name, "error": errors.get(name, "no samples")})
            continue
        row = _latency(name, ours[name])
        base = _latency(baseline, paired[name]) if paired.get(name) else None
        if name == baseline:
            row.update(ratio_mean=1.0, ratio_p50=1.0, over_mean_us=0.0, over_p50_us=0.0)
        elif base is not None:
            row.update(
                ratio_mean=row["mean_us"] / base["mean_us"],
                ratio_p50=row["p50_us"] / base["p50_us"],
                over_mean_us=row["mean_us"] - base["mean_us"],
                over_p50_us=row["p50_us"] - base["p50_us"],
                base_mean_us=base["mean_us"],
            )
        rows.append(row)
    return rows


# -- 2. contention ------------------------------------------------------------------------------


def _contention_child(
    name: str,
    target: str,
    cpu: int | None,
    settings: Settings,
    barrier: Any,
    results: Any,
) -> None:
    pid = os.getpid()
    try:
        pin_self(cpu)
        acquire, release = by_name(name).open(target)("bench:contended")
        if not acquire():  # warm-up: connect, load scripts, create files
            raise RuntimeError("acquire returned False")
        release()
        barrier.wait(_STARTUP_LIMIT)
        start = time.monotonic()
        stop = start + settings.seconds
        hold = settings.hold
        sections: list[Section] = []
        while True:
            asked = time.monotonic()
            if asked >= stop:
                break
            if not acquire():
                raise RuntimeError("a blocking acquire returned False")
            got = time.monotonic()
            spin(hold)
            done = time.monotonic()
            release()
            sections.append((asked, got, done, pid))
        results.put((pid, start, sections, None))
    except BaseException as exc:
        barrier.abort()
        results.put((pid, math.inf, [], _describe(exc)))


def _collect(workers: Sequence[Any], results: Any, barrier: Any, limit: float) -> list[Any]:
    """One report per worker; a worker that died without one aborts the run at once."""
    reports: dict[int, Any] = {}
    deadline = time.monotonic() + limit
    while len(reports) < len(workers):
        if time.monotonic() > deadline:
            raise TimeoutError(f"workers did not finish within {limit:g} s")
        try:
            report = results.get(timeout=0.2)
        except queue.Empty:
            dead = [w for w in workers if w.exitcode is not None and w.pid not in reports]
            if dead:
                barrier.abort()  # release the others from the start line
                raise RuntimeError(f"a worker exited with code {dead[0].exitcode}") from None
            continue
        reports[report[0]] = report
    return list(reports.values())


Run = tuple[list[Section], float]


class WorkerFailed(Exception):
    """A contention worker reported an error (already described)."""


def _contend_once(name: str, target: str, settings: Settings, cpu: int | None) -> Run:
    """One run: every worker's sections and the start of the earliest; raises on failure."""
    barrier = _SPAWN.Barrier(settings.processes)
    results = _SPAWN.Queue()
    workers = [
        _SPAWN.Process(
            target=_contention_child,
            args=(name, target, cpu, settings, barrier, results),
            daemon=True,
        )
        for _ in range(settings.processes)
    ]
    for worker in workers:
        worker.start()
    try:
        reports = _collect(workers, results, barrier, settings.seconds + _STARTUP_LIMIT)
    finally:
        for worker in workers:
            worker.join(5.0)
            if worker.is_alive():
                worker.terminate()
    failures = [error for *_, error in reports if error is not None]
    if failures:
        # A worker that broke the barrier is the cause; the others only saw it broken.
        failures.sort(key=lambda error: error.startswith("BrokenBarrierError"))
        raise WorkerFailed(failures[0])
    sections = [section for _, _, found, _ in reports for section in found]
    return sections, min(start for _, start, _, _ in reports)


def contention(
    names: Sequence[str], fresh_target: FreshTarget, settings: Settings, cpu: int | None
) -> list[Row]:
    """N processes, one key, fixed wall time per run; each library runs
    ``contention_rounds`` times, the libraries taking turns (in reversed order every other
    round) so that a change in the machine's load falls on all of them."""
    runs: dict[str, list[Run]] = {name: [] for name in names}
    errors: dict[str, str] = {}
    rounds = max(1, settings.contention_rounds)
    for round_no in range(rounds):
        for name in names if round_no % 2 == 0 else names[::-1]:
            if name in errors:
                continue
            _progress(
                f"contention   round {round_no + 1}/{rounds}  {settings.processes} processes  "
                f"{name}"
            )
            try:
                runs[name].append(_contend_once(name, fresh_target(), settings, cpu))
            except WorkerFailed as exc:
                errors[name] = str(exc)
            except Exception as exc:
                errors[name] = _describe(exc)
    rows: list[Row] = []
    for name in names:
        if name in errors:
            rows.append({"library": name, "error": errors[name]})
            continue
        stats = section_stats(runs[name], settings.seconds, settings.processes)
        rows.append({"library": name, "waits_by": by_name(name).waits_by, **asdict(stats)})
    return rows


# -- 3. many keys -------------------------------------------------------------------------------


def _many_keys_child(name: str, target: str, cycles: int, keys: int, warmup: int) -> float:
    factory = by_name(name).open(target)
    acquire, release = factory("bench:warmup")
    for _ in range(warmup):
        acquire()
        release()
    names = [f"bench:key:{i}" for i in range(keys)]
    started = time.perf_counter()
    for i in range(cycles):
        acquire, release = factory(names[i % keys])
        if not acquire():
            raise RuntimeError("acquire returned False on a free key")
        release()
    return time.perf_counter() - started


def many_keys(
    names: Sequence[str], fresh_target: FreshTarget, settings: Settings, cpu: int | None
) -> list[Row]:
    """Total time for ``many_cycles`` cycles round-robin over ``many_keys`` keys."""
    rows: list[Row] = []
    for name in names:
        _progress(f"many keys    {settings.many_cycles} cycles  {name}")
        try:
            seconds = isolated(
                cpu,
                _many_keys_child,
                name,
                fresh_target(),
                settings.many_cycles,
                settings.many_keys,
                settings.warmup,
            )
        except Exception as exc:
            rows.append({"library": name, "error": _describe(exc)})
            continue
        rows.append(
            {
                "library": name,
                "cycles": settings.many_cycles,
                "keys": settings.many_keys,
                "seconds": seconds,
                "per_second": settings.many_cycles / seconds,
                "mean_us": seconds / settings.many_cycles * 1e6,
            }
        )
    return rows


def _progress(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)
