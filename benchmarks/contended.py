"""``python -m benchmarks.contended``: the contention scenario alone, repeated, with medians.

The contended target (lockkit's CS/s >= redis-py Lock's with a max wait <= 1/10 of its) is
judged on noisy shared machines, so this runs only scenario 2 of the benchmark, for a few
contenders (lockkit and redis-py Lock by default), ``--repeats`` times per pinning. Within a
repeat the contenders take turns on the same fresh server, in reversed order every other
repeat, so a change in the machine's load falls on all of them; each repeat's numbers are
printed, then the median of every column over the repeats.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from . import report, scenarios
from .contenders import CONTENDERS, PEERS
from .machine import PINNING_NAMES, choose_pinnings, pin_self
from .scenarios import Settings
from .servers import redis_server

#: the columns whose median is reported
_MEDIAN_KEYS = ("per_second", "wait_p50", "wait_p99", "wait_max", "handoff_share", "overlaps")


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    names = [c.name for c in CONTENDERS if c.family == "redis"]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.contended", description=__doc__)
    parser.add_argument(
        "contenders",
        nargs="*",
        default=["lockkit", PEERS["redis"]],
        help=f"contenders to run (default: lockkit and {PEERS['redis']!r}); one of {names}",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--pinning", choices=(*PINNING_NAMES, "both"), default="both")
    args = parser.parse_args(argv)
    unknown = [name for name in args.contenders if name not in names]
    if unknown:
        parser.error(f"unknown contender(s) {unknown}; known: {names}")
    return args


def _medians(name: str, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    ok = [row for row in rows if "error" not in row]
    if not ok:
        return {"library": name, "error": rows[0]["error"] if rows else "no runs"}
    out: dict[str, Any] = {"library": f"{name} (median of {len(ok)})"}
    for key in _MEDIAN_KEYS:
        out[key] = statistics.median(row[key] for row in ok)
    out["per_process_min"] = min(row["per_process_min"] for row in ok)
    out["per_process_max"] = max(row["per_process_max"] for row in ok)
    out["waits_by"] = ok[0]["waits_by"]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the contention scenario ``--repeats`` times per pinning; print every run, then
    the medians and lockkit's target verdict on them."""
    args = _parse(argv)
    settings = dataclasses.replace(
        Settings(), seconds=args.seconds, processes=args.processes, contention_rounds=1
    )
    wanted = PINNING_NAMES if args.pinning == "both" else (args.pinning,)
    peer = PEERS["redis"]
    for pinning in choose_pinnings(wanted):
        with redis_server(pinning.server_cpu) as server:
            pin_self(pinning.client_cpu)

            def fresh() -> str:
                server.reset()
                return server.url

            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.contenders}
            shown: list[dict[str, Any]] = []
            for repeat in range(args.repeats):
                order = args.contenders if repeat % 2 == 0 else args.contenders[::-1]
                rows = scenarios.contention(order, fresh, settings, pinning.client_cpu)
                rows = report.with_ratio(rows, peer, "per_second", "ratio_rate")
                rows = report.with_ratio(rows, peer, "wait_max", "ratio_wait_max")
                for row in rows:
                    runs[row["library"]].append(row)
                    shown.append({**row, "library": f"{row['library']} #{repeat + 1}"})
        medians = [_medians(name, runs[name]) for name in args.contenders]
        base = next((m for m in medians if m["library"].startswith(peer + " (")), None)
        for row in medians:
            if base is not None and "error" not in row and "error" not in base:
                row["ratio_rate"] = row["per_second"] / base["per_second"]
                row["ratio_wait_max"] = row["wait_max"] / base["wait_max"]
        title = (
            f"[{pinning.name}] {settings.processes} processes on one key, "
            f"{settings.hold * 1e3:g} ms busy-wait per section, {settings.seconds:g} s per run; "
            f"x peer = vs {peer} ({pinning.note})"
        )
        print(report.render_table(title, report.CONTENTION, [*shown, *medians]))
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
