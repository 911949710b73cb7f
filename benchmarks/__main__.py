"""``python -m benchmarks [--quick] [--only redis|file] [--pinning same|split|both]``.

Starts its own redis-server, pins it and every client process (the same way for every
library), runs the three scenarios for each family of contenders, prints one table per
scenario and family with the libraries side by side, then lockkit's targets. The Redis family
runs twice, once per pinning (see :mod:`benchmarks.machine`): with the server on the clients'
CPU, and on a CPU of its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from . import report, scenarios
from .contenders import BASELINES, CONTENDERS, PEERS, TTL, Family
from .machine import (
    PINNING_NAMES,
    Pinning,
    choose_pinnings,
    library_versions,
    load_average,
    machine_facts,
    pin_self,
)
from .scenarios import FreshTarget, Settings

QUICK = Settings(
    cycles=500,
    rounds=1,
    warmup=50,
    seconds=1.0,
    contention_rounds=1,
    many_cycles=1000,
    many_keys=200,
)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/bench",
        description="lockkit against peer lock libraries on the same pinned redis-server "
        "and file system: three scenarios, one table each, then lockkit's targets.",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: few cycles, 1 s")
    parser.add_argument("--only", choices=("redis", "file"), help="one family of contenders")
    parser.add_argument(
        "--pinning",
        choices=(*PINNING_NAMES, "both"),
        default="both",
        help="redis-server on the clients' CPU (same), on its own (split), or both (default)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--cycles", type=int, help="uncontended cycles per library")
    parser.add_argument("--seconds", type=float, help="wall time of each contention run")
    parser.add_argument("--processes", type=int, help="contending processes (default 8)")
    return parser.parse_args(argv)


def _settings(args: argparse.Namespace) -> Settings:
    base = QUICK if args.quick else Settings()
    changes: dict[str, Any] = {
        name: value
        for name, value in (
            ("cycles", args.cycles),
            ("seconds", args.seconds),
            ("processes", args.processes),
        )
        if value is not None
    }
    return dataclasses.replace(base, **changes)


def _redis_target(stack: ExitStack, cpu: int | None) -> tuple[FreshTarget, str]:
    """Start the server (stopped when ``stack`` closes); runs get it flushed."""
    from .servers import redis_server

    server = stack.enter_context(redis_server(cpu))

    def fresh() -> str:
        server.reset()
        return server.url

    return fresh, f"redis-server {server.version} at {server.url}, --save '' --appendonly no"


def _file_target(stack: ExitStack) -> tuple[FreshTarget, str]:
    """A temporary root (removed when ``stack`` closes); each run gets a new directory in it."""
    root = stack.enter_context(tempfile.TemporaryDirectory(prefix="lockkit-bench-"))

    def fresh() -> str:
        return tempfile.mkdtemp(dir=root)

    return fresh, f"lock files under {root} (a new directory per run)"


@dataclass(frozen=True)
class Run:
    """One family of contenders under one pinning."""

    family: Family
    pinning: Pinning

    @property
    def label(self) -> str:
        return f"{self.family}, {self.pinning.name}" if self.family == "redis" else self.family


def _run_family(
    run: Run, fresh: FreshTarget, settings: Settings
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    names, skipped = [], []
    for contender in CONTENDERS:
        if contender.family != run.family:
            continue
        why = contender.missing()
        if why is None:
            names.append(contender.name)
        else:
            skipped.append(f"{contender.name}: skipped, {why}")
    cpu = run.pinning.client_cpu
    base = BASELINES[run.family]
    uncontended = scenarios.uncontended(names, base, fresh, settings, cpu)
    contention = scenarios.contention(names, fresh, settings, cpu)
    contention = report.with_ratio(contention, PEERS[run.family], "per_second", "ratio_rate")
    contention = report.with_ratio(contention, PEERS[run.family], "wait_max", "ratio_wait_max")
    many = scenarios.many_keys(names, fresh, settings, cpu)
    many = report.with_ratio(many, base, "seconds", "ratio_time")
    return {"uncontended": uncontended, "contention": contention, "many_keys": many}, skipped


def _tables(run: Run, rows: dict[str, list[dict[str, Any]]], s: Settings) -> list[str]:
    base = BASELINES[run.family]
    peer = PEERS[run.family]
    per_round = -(-s.cycles // s.rounds)
    where = f" ({run.pinning.describe(with_server=run.family == 'redis')})"
    return [
        report.render_table(
            f"[{run.label}] 1. uncontended acquire+release, one key, one process: "
            f"{s.rounds} round(s) of {per_round:,} cycles after {s.warmup} warm-up; each library "
            f"runs in fresh processes taking turns with {base} (blocks of {s.block}); "
            "x base and + base = vs that base in the same processes" + where,
            report.UNCONTENDED,
            rows["uncontended"],
        ),
        report.render_table(
            f"[{run.label}] 2. {s.processes} processes contending for one key, each holding it "
            f"{s.hold * 1e3:g} ms (busy-wait) per section, {s.contention_rounds} run(s) of "
            f"{s.seconds:g} s per library taking turns; "
            f"handoffs = consecutive sections by a different process; x peer = vs {peer}" + where,
            report.CONTENTION,
            rows["contention"],
        ),
        report.render_table(
            f"[{run.label}] 3. {s.many_cycles:,} acquire+release cycles over {s.many_keys:,} "
            f"keys, a new handle per cycle, one process; x base = vs {base}" + where,
            report.MANY_KEYS,
            rows["many_keys"],
        ),
    ]


def _load(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f}"


def _plan(args: argparse.Namespace) -> list[Run]:
    families: list[Family] = ["redis", "file"] if args.only is None else [args.only]
    wanted = PINNING_NAMES if args.pinning == "both" else (args.pinning,)
    pinnings = choose_pinnings(wanted)
    runs = []
    for family in families:
        if family == "redis":
            runs += [Run("redis", pinning) for pinning in pinnings]
        else:  # no server: the clients' CPU is all that matters, one run is enough
            runs.append(Run("file", pinnings[-1]))
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks; 0 on success, 1 if any library failed to run."""
    args = _parse(argv)
    settings = _settings(args)
    runs = _plan(args)
    facts = machine_facts()
    versions = library_versions()
    started = time.monotonic()
    load_before = load_average()
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    stores: dict[str, str] = {}
    notes: list[str] = []
    for run in runs:
        with ExitStack() as stack:
            if run.family == "redis":
                fresh, store = _redis_target(stack, run.pinning.server_cpu)
            else:
                fresh, store = _file_target(stack)
            pin_self(run.pinning.client_cpu)  # after the server started and was pinned
            stores[run.label] = store
            print(f"{run.label}: {store}", file=sys.stderr, flush=True)
            results[run.label], skipped = _run_family(run, fresh, settings)
            notes += [note for note in skipped if note not in notes]
    elapsed = time.monotonic() - started
    load_after = load_average()

    header = [
        "lockkit benchmarks",
        f"machine    nproc {facts['nproc']}, {facts['cpu']}, {facts['os']}, {facts['python']}",
        *(f"{label:<10} {store}" for label, store in stores.items()),
        *(
            f"pinning    [{run.label}] {run.pinning.describe(with_server=run.family == 'redis')}"
            for run in runs
        ),
        "libraries  " + ", ".join(f"{name} {version}" for name, version in versions.items()),
        f"leases     ttl {TTL:g} s for every library; blocking acquires with each library's "
        "default way of waiting",
        f"run time   {elapsed:.0f} s; 1-min load average {_load(load_before)} before, "
        f"{_load(load_after)} after (includes our own workers)",
        *(f"note       {note}" for note in notes),
    ]
    print("\n".join(header))
    for run in runs:
        for table in _tables(run, results[run.label], settings):
            print()
            print(table)
    targets = report.check_targets(results)
    if targets:
        print("\nlockkit targets")
        for t in targets:
            print(f"  {t['verdict']:<12} [{t['run']}] {t['target']}: {t['detail']}")
    if args.json:
        report.write_json(
            args.json,
            {
                "machine": facts,
                "stores": stores,
                "pinnings": {
                    run.label: {
                        "server_cpu": run.pinning.server_cpu,
                        "client_cpu": run.pinning.client_cpu,
                        "note": run.pinning.note,
                    }
                    for run in runs
                },
                "versions": versions,
                "ttl": TTL,
                "settings": settings.as_dict(),
                "notes": notes,
                "results": results,
                "targets": targets,
                "seconds": elapsed,
                "load_average": {"before": load_before, "after": load_after},
            },
        )
    failed = any("error" in row for rows in results.values() for r in rows.values() for row in r)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
