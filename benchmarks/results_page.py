"""``python -m benchmarks.results_page``: the results page, docs/results/benchmarks.md + charts.

One command (``scripts/bench-report``) runs the benchmark scenarios of :mod:`benchmarks.scenarios`
for lockkit on every store and for the peer libraries, with one fixed pinning (``split`` where
the machine has two CPUs: servers on the first, every client process on the second), and
writes a Markdown page and four PNG charts (:mod:`benchmarks.charts`):

1. uncontended acquire+release latency, lockkit on each store beside the peers;
2. contended sections per second against the longest wait (8 processes, one key);
3. hand-off fairness: the fewest and most sections one process got in that run;
4. median wait against the number of contenders (1, 2, 4, 8, 16).

Numbers come from the machine it runs on; the page says which, and when.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from . import charts, scenarios
from .contenders import CONTENDERS
from .machine import choose_pinnings, library_versions, load_average, machine_facts, pin_self
from .scenarios import Settings

STORE = "lockkit on the target URL"
#: the peers and lockkit rows of the two families the existing benchmarks compare
PEER_ROWS = {
    "redis": ["lockkit", "redis-py Lock", "python-redis-lock", "pottery Redlock (1 master)"],
    "file": ["lockkit file://", "filelock", "portalocker"],
}
#: the rows of the contenders chart: lockkit and the best-known peer of each family
SCALING_ROWS = ["lockkit", "redis-py Lock", "lockkit file://", "filelock"]
CONTENDER_COUNTS = (1, 2, 4, 8, 16)
OUT = Path("docs/results")

Row = dict[str, Any]
Target = Callable[[], str]


@contextmanager
def stores(which: Sequence[str], cpu: int | None) -> Iterator[dict[str, Target]]:
    """Start the servers of the stores asked for; each yields a fresh target per run."""
    from lockkit_core.testing import MariaDBServer, PostgresServer, ZooKeeperServer
    from lockkit_core.testing.etcd import EtcdServer

    from .servers import redis_server

    with ExitStack() as stack:
        root = stack.enter_context(tempfile.TemporaryDirectory(prefix="lockkit-report-"))
        counter = iter(range(1_000_000))
        targets: dict[str, Target] = {}
        for name in which:
            if name == "redis":
                targets[name] = _flushed(stack.enter_context(redis_server(cpu)))
            elif name == "file":
                targets[name] = lambda: tempfile.mkdtemp(dir=root)
            elif name == "sqlite":
                targets[name] = lambda: f"sqlite://{root}/locks-{next(counter)}.db"
            elif name == "memory":
                targets[name] = lambda: f"memory://bench-{next(counter)}"
            else:
                made = {"etcd": EtcdServer, "zookeeper": ZooKeeperServer,
                        "postgresql": PostgresServer, "mysql": MariaDBServer}[name]()  # fmt: skip
                stack.callback(made.close)
                targets[name] = functools.partial(str, made.url)
        yield targets


def _flushed(server: Any) -> Target:
    """The redis-server's URL, its keys dropped first, so every run starts from empty."""

    def fresh() -> str:
        server.reset()
        return str(server.url)

    return fresh


def _family_target(name: str, targets: dict[str, Target]) -> Target:
    """lockkit's rows on file:// get a directory; the store rows get a URL."""
    if name == "file":
        return lambda: "file://" + targets["file"]()
    return targets[name]


def run(settings: Settings, store_names: Sequence[str], scaling_seconds: float) -> dict[str, Any]:
    pinning = choose_pinnings(("split",))[0]
    cpu = pinning.client_cpu
    pin_self(pinning.server_cpu)  # servers started below inherit it
    available = {c.name for c in CONTENDERS if c.missing() is None}
    result: dict[str, Any] = {"uncontended": [], "contention": [], "scaling": []}
    with stores(sorted({"redis", "file", *store_names}), pinning.server_cpu) as targets:
        pin_self(None)
        for family, wanted in PEER_ROWS.items():
            names = [n for n in wanted if n in available]
            result["uncontended"] += scenarios.uncontended(
                names, names[0], targets[family], settings, cpu
            )
            result["contention"] += scenarios.contention(names, targets[family], settings, cpu)
        for store in store_names:
            fresh = _family_target(store, targets)
            rows = scenarios.uncontended([STORE], STORE, fresh, settings, cpu)
            result["uncontended"] += [{**r, "library": f"lockkit {store}://"} for r in rows]
            if store != "memory":  # in-process only: no processes to contend
                rows = scenarios.contention([STORE], fresh, settings, cpu)
                result["contention"] += [{**r, "library": f"lockkit {store}://"} for r in rows]
        short = dataclasses.replace(settings, seconds=scaling_seconds, contention_rounds=1)
        for count in CONTENDER_COUNTS:
            each = dataclasses.replace(short, processes=count)
            for family, wanted in PEER_ROWS.items():
                names = [n for n in wanted if n in SCALING_ROWS and n in available]
                for row in scenarios.contention(names, targets[family], each, cpu):
                    result["scaling"].append({**row, "processes": count})
    result["pinning"] = pinning.describe(with_server=True)
    return result


def markdown(result: dict[str, Any], meta: dict[str, Any]) -> str:
    """The page: how it was measured, the charts, then the tables."""

    def fmt(value: Any, digits: int = 0) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    lines = [
        "# Benchmark results",
        "",
        "Generated by `scripts/bench-report` (`python -m benchmarks.results_page`); numbers from "
        "one machine say little about another, so run it on yours. "
        f"Measured {meta['when']} on {meta['machine']}, {meta['pinning']}, load average "
        f"{meta.get('load')} at the end of the run (other work on the machine slows every row). "
        f"Settings: {meta['settings']}.",
        "",
        "![Uncontended latency](benchmarks-uncontended.png)",
        "![Contended throughput against the longest wait](benchmarks-contended.png)",
        "![Hand-off fairness](benchmarks-fairness.png)",
        "![Wait against contenders](benchmarks-contenders.png)",
        "",
        "## Uncontended acquire + release",
        "",
        "| library | p50 µs | p99 µs | mean µs |",
        "|---|---:|---:|---:|",
    ]
    for r in result["uncontended"]:
        if "error" in r:
            lines.append(f"| {r['library']} | error: {r['error']} | | |")
            continue
        lines.append(f"| {r['library']} | {fmt(r['p50_us'], 1)} | {fmt(r['p99_us'], 1)} | "
                     f"{fmt(r['mean_us'], 1)} |")  # fmt: skip
    lines += [
        "",
        "## One key, 8 processes",
        "",
        "| library | sections/s | wait p50 ms | wait p99 ms | wait max ms | fewest / most "
        "per process | overlaps |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["contention"]:
        if "error" in r:
            lines.append(f"| {r['library']} | error: {r['error']} | | | | | |")
            continue
        lines.append(
            f"| {r['library']} | {fmt(r['per_second'])} | {fmt(r['wait_p50'] * 1e3, 2)} | "
            f"{fmt(r['wait_p99'] * 1e3, 2)} | {fmt(r['wait_max'] * 1e3, 1)} | "
            f"{r['per_process_min']} / {r['per_process_max']} | {r['overlaps']} |"
        )
    lines += ["", "## Median wait (ms) against the number of contenders", ""]
    libraries = list(dict.fromkeys(r["library"] for r in result["scaling"]))
    lines += ["| library | " + " | ".join(str(n) for n in CONTENDER_COUNTS) + " |",
              "|---|" + "---:|" * len(CONTENDER_COUNTS)]  # fmt: skip
    for library in libraries:
        cells = []
        for count in CONTENDER_COUNTS:
            found = [
                r
                for r in result["scaling"]
                if r["library"] == library and r["processes"] == count and "error" not in r
            ]
            cells.append(fmt(found[0]["wait_p50"] * 1e3, 2) if found else "-")
        lines.append(f"| {library} | " + " | ".join(cells) + " |")
    lines += ["", f"Library versions: {meta['versions']}.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-report", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few cycles, 1 s")
    parser.add_argument(
        "--stores",
        default="memory,file,sqlite,redis,etcd,zookeeper,postgresql,mysql",
        help="lockkit's stores to run, comma-separated",
    )
    parser.add_argument("--out", type=Path, default=OUT, help="where the page and charts go")
    args = parser.parse_args(argv)
    settings = Settings(cycles=400, rounds=1, warmup=40, seconds=1.0, contention_rounds=1)
    if not args.quick:
        settings = Settings(cycles=2000, rounds=2, warmup=100, seconds=2.0, contention_rounds=2)
    result = run(settings, args.stores.split(","), scaling_seconds=settings.seconds / 2)
    facts = machine_facts()
    meta = {
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": ", ".join(f"{k} {v}" for k, v in facts.items()),
        "pinning": result["pinning"],
        "load": load_average(),
        "settings": ", ".join(f"{k}={v}" for k, v in settings.as_dict().items()),
        "versions": ", ".join(f"{k} {v}" for k, v in library_versions().items()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "benchmarks.json").write_text(json.dumps({**result, "meta": meta}, indent=1))
    charts.draw(result, args.out, CONTENDER_COUNTS)
    (args.out / "benchmarks.md").write_text(markdown(result, meta))
    print(f"wrote {args.out}/benchmarks.md, its charts and benchmarks.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
