"""Per-request cost of ``LockMiddleware``; run ``scripts/bench-django [--quick]``.

Three questions, each against the same trivial view with the middleware out of
``MIDDLEWARE`` (the baseline):

1. a path that matches no rule: what does the middleware cost when it locks nothing?
2. a path whose rule locks on Redis: what does a lock cost, and how many commands (round
   trips) does a request send to the server?
3. the same on the ``file://`` default store.

Over HTTP: the project in ``benchmarks/django_settings.py`` is served by gunicorn (2 sync
workers, as the Flask benchmark's worker count; neither gunicorn nor wrk is pinned, as there)
and loaded by ``wrk`` (or a threaded Python client where wrk is missing); every request asks
for a fresh number, so a locked route locks a fresh key and never waits for another request.
The three servers run side by side and the rows interleave over rounds; the first round
warms up and is dropped, the others' medians are shown. In process (see
:mod:`benchmarks.django_inprocess`): the same requests through Django's WSGI handler, where
differences of a few microseconds are visible. Redis commands are counted with MONITOR in a
separate run of sequential requests (see :mod:`benchmarks.redis_monitor`). redis-server is
pinned to one CPU, and the in-process part runs on that CPU too (``--pinning same``: short
round trips, so client-side cost shows) or on another (``split``).
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from .http_load import Result, run_python, run_wrk, start_gunicorn
from .machine import choose_pinnings, load_average, pin_self
from .redis_monitor import CommandCounter
from .servers import redis_server

ROOT = Path(__file__).resolve().parent.parent

#: the no-rule path's budget, and the commands a locked request may send (acquire, release)
NO_RULE_BUDGET_US = 20.0
ROUND_TRIP_BUDGET = 2.0
#: a locked request on Redis may add this many times a bare SET NX PX + compare-and-delete
FLOOR_BUDGET = 1.2


@dataclass(frozen=True)
class Row:
    """One line of the HTTP table: which server, which route."""

    label: str
    server: str
    route: str


@dataclass(frozen=True)
class Server:
    """A running gunicorn and, for a Redis store, the server's port to count commands on."""

    process: subprocess.Popen[bytes]
    port: int
    redis_port: int | None


def _gunicorn(
    name: str, middleware: bool, url: str, tmp: Path
) -> tuple[subprocess.Popen[bytes], int]:
    env = {
        "DJANGO_SETTINGS_MODULE": "benchmarks.django_settings",
        "BENCH_LOCK_MIDDLEWARE": "1" if middleware else "0",
        "BENCH_LOCKKIT_URL": url,
    }
    return start_gunicorn(
        "django.core.wsgi:get_wsgi_application()",
        ["-w", "2", "-k", "sync"],
        env,
        "/health",
        tmp / f"gunicorn-{name}.log",
        ROOT,
    )


def _commands_per_request(server: Server, route: str, requests: int) -> Counter[str] | None:
    """Commands clients sent to Redis, over ``requests`` sequential ones: None if ``server``
    locks on no Redis."""
    if server.redis_port is None:
        return None
    with CommandCounter(server.redis_port) as seen:
        for n in range(requests):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("GET", f"/{route}/{10**12 + n}")
            status = conn.getresponse().status
            conn.close()
            if status != 200:
                raise RuntimeError(f"/{route}/ answered {status} while counting commands")
    return seen.commands


def _per_request(commands: Counter[str] | None, requests: int) -> str:
    if commands is None:
        return "-"
    total = f"{sum(commands.values()) / requests:.2f}"
    each = ", ".join(f"{name} {calls / requests:.2f}" for name, calls in sorted(commands.items()))
    return f"{total} ({each})" if each else total


def run_http(args: argparse.Namespace, redis_url: str | None, tmp: Path) -> None:
    """Serve, load and print the HTTP table."""
    use_wrk = shutil.which("wrk") is not None and not args.python_client
    file_url = f"file://{tmp}/http-locks"
    store = "redis" if redis_url is not None else "file"
    rows = [
        Row("no middleware", "base", "plain"),
        Row("middleware, no rule", store, "plain"),
        Row("rule, file://", "file", "locked"),
    ]
    configs = {"base": (False, file_url), "file": (True, file_url)}
    if redis_url is not None:
        rows.append(Row("rule, redis://", "redis", "locked"))
        configs["redis"] = (True, redis_url)
    servers: dict[str, Server] = {}
    try:
        for name, (middleware, url) in configs.items():
            process, port = _gunicorn(name, middleware, url, tmp)
            port_of_redis = int(url.rsplit(":", 1)[1].split("/")[0]) if name == "redis" else None
            servers[name] = Server(process, port, port_of_redis)
        kept: dict[Row, list[Result]] = {row: [] for row in rows}
        for i in range(args.rounds + 1):  # round 0 warms every worker up
            for row in rows:
                port = servers[row.server].port
                if use_wrk:
                    result = run_wrk(port, row.route, args.seconds, args.connections, tmp)
                else:
                    result = run_python(port, row.route, args.seconds, args.connections)
                if i:
                    kept[row].append(result)
        # Sync workers still serve requests wrk left in the listen backlog when it stopped.
        time.sleep(1.0)
        commands = {
            row: _commands_per_request(servers[row.server], row.route, args.count) for row in rows
        }
    finally:
        for server in servers.values():
            server.process.send_signal(signal.SIGTERM)
        for server in servers.values():
            server.process.wait(10)
    tool = "wrk -t2" if use_wrk else "Python client"
    print(
        f"\nHTTP: gunicorn 2 sync workers per server; {tool}, {args.connections} connections, "
        f"{args.seconds:g} s per row, median of {args.rounds} round(s) after a warm-up round"
    )
    print(
        f"{'':22} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} "
        f"{'+p50 us':>8} {'req/s vs base':>13}  redis commands per request"
    )
    base = kept[rows[0]]
    base_rate = statistics.median(r.per_second for r in base)
    base_p50 = statistics.median(r.p50_ms for r in base)
    for row in rows:
        runs = kept[row]
        rate = statistics.median(r.per_second for r in runs)
        p50 = statistics.median(r.p50_ms for r in runs)
        p99 = statistics.median(r.p99_ms for r in runs)
        errors = sum(r.errors for r in runs)
        extra = "" if row is rows[0] else f"{(p50 - base_p50) * 1000:8.0f} {rate / base_rate:13.0%}"
        shown = _per_request(commands[row], args.count)
        print(f"{row.label:22} {rate:8.0f} {p50:7.2f} {p99:7.2f} {errors:6d} {extra:>22}  {shown}")


def run_in_process(
    args: argparse.Namespace, redis_url: str | None, tmp: Path, redis_pid: int | None = None
) -> list[str]:
    """Measure through Django's handler, print the table; return the budgets missed.
    ``redis_pid``: the server's, to count its CPU time with this process's."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.django_settings")
    import django

    django.setup()
    from .django_inprocess import cases, measure

    missed = []
    print(
        f"\nIn process: Django's WSGI handler, {args.requests} requests x {args.in_rounds} "
        "alternating batches per handler; microseconds per request"
    )
    print(
        f"{'':18} {'base mean':>9} {'base p50':>8} {'mw mean':>8} {'mw p50':>8} {'mw p99':>8} "
        f"{'+mean':>7} {'+p50':>7}  redis commands per request"
    )
    for case in cases(f"file://{tmp}/locks", redis_url):
        m = measure(case, args.requests, args.in_rounds, redis_pid)
        count = "-" if m.commands_per_request is None else f"{m.commands_per_request:.2f}"
        if m.commands:
            count += " (" + ", ".join(f"{k} {v:.2f}" for k, v in m.commands.items()) + ")"
        print(
            f"{case.name:18} {m.without_mean:9.1f} {m.without_p50:8.1f} {m.with_mean:8.1f} "
            f"{m.with_p50:8.1f} {m.with_p99:8.1f} {m.mean_overhead:7.1f} {m.p50_overhead:7.1f} "
            f" {count}"
        )
        if m.floor_ratio is not None and m.floor_in_view is not None:
            print(
                f"{'  floor':18} bare redis-py SET NX PX + compare-and-delete by hand in the "
                f"view adds {m.floor_in_view:.1f} us p50; the rule adds {m.floor_ratio:.2f}x "
                f"that (budget {FLOOR_BUDGET}x)"
            )
            if m.floor_p50 is not None and m.tight_floor_ratio is not None:
                print(
                    f"{'':18} the same cycles in a tight loop: p50 {m.floor_p50:.1f} us; the "
                    f"rule adds {m.tight_floor_ratio:.2f}x that (caches warm: see "
                    "benchmarks.redis_floor)"
                )
            if m.floor_cpu_in_view and m.floor_cpu is not None:
                print(
                    f"{'':18} CPU (this process + redis-server, per request): the rule adds "
                    f"{m.cpu_overhead:.1f} us, the floor in the view {m.floor_cpu_in_view:.1f} us "
                    f"({m.cpu_overhead / m.floor_cpu_in_view:.2f}x), in a tight loop "
                    f"{m.floor_cpu:.1f} us"
                )
            if m.floor_ratio > FLOOR_BUDGET:
                missed.append(f"{case.name}: {m.floor_ratio:.2f}x the redis-py floor")
        if case.route == "plain" and m.p50_overhead > NO_RULE_BUDGET_US:
            missed.append(f"no-rule path adds {m.p50_overhead:.1f} us (budget {NO_RULE_BUDGET_US})")
        if m.commands_per_request is not None and m.commands_per_request > (
            ROUND_TRIP_BUDGET if case.route == "locked" else 0
        ):
            missed.append(f"{case.name}: {m.commands_per_request:.2f} redis commands per request")
    return missed


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/bench-django", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="short runs (well under a minute)")
    parser.add_argument("--seconds", type=float, help="wrk seconds per row and round (5)")
    parser.add_argument("--rounds", type=int, help="HTTP rounds after the warm-up one (2)")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--count", type=int, help="sequential requests to count commands (200)")
    parser.add_argument("--requests", type=int, help="in-process requests per batch (500)")
    parser.add_argument("--in-rounds", type=int, help="in-process batches per handler (20)")
    parser.add_argument("--only", choices=["http", "in-process"], help="run one part")
    parser.add_argument("--no-redis", action="store_true", help="file:// only; no redis-server")
    parser.add_argument("--pinning", choices=["same", "split"], default="same")
    parser.add_argument("--python-client", action="store_true", help="do not use wrk")
    args = parser.parse_args(argv)
    quick = {"seconds": 1.0, "rounds": 1, "count": 50, "requests": 200, "in_rounds": 6}
    full = {"seconds": 5.0, "rounds": 2, "count": 200, "requests": 500, "in_rounds": 20}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its tables; exit 1 if a budget was missed."""
    args = _parse(argv)
    (pinning,) = choose_pinnings((args.pinning,))
    load = load_average()
    print(
        f"LockMiddleware per-request cost; {os.cpu_count()} CPUs, load {load or 0:.1f}; "
        f"{pinning.note}"
    )
    missed: list[str] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-django-")))
        redis_url = redis_pid = None
        if not args.no_redis:
            server = stack.enter_context(redis_server(pinning.server_cpu))
            redis_url, redis_pid = server.url, server.pid
        if args.only != "in-process":
            run_http(args, redis_url, tmp)
        if args.only != "http":
            allowed = os.sched_getaffinity(0)
            pin_self(pinning.client_cpu)
            try:
                missed = run_in_process(args, redis_url, tmp, redis_pid)
            finally:
                os.sched_setaffinity(0, allowed)
    for line in missed:
        print(f"over budget: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
