"""Per-request cost of ``@lock_route`` under a real WSGI server; run ``scripts/bench-flask``.

The same tiny view is served with and without ``@lock_route`` by gunicorn (2 workers x 4
gthread threads) and loaded by ``wrk`` (or, where wrk is missing, a threaded Python client)
over keep-alive connections; every request locks a fresh key, so what is measured is the
lock's own cost (one acquire and one release on the store), not waiting for others.
The app below is also what gunicorn imports: ``benchmarks.flask_route:create_app()``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from flask import Flask

from lockkit_core.testing.servers import RedisServer
from lockkit_flask import LockKit, lock_route

from .http_load import Result, run_python, run_wrk, start_gunicorn

ROOT = Path(__file__).resolve().parent.parent


def create_app() -> Flask:
    """Two copies of one view: ``/plain/<key>`` and ``/locked/<key>``."""
    app = Flask("flask_route_bench")
    app.config.from_prefixed_env("BENCH")
    LockKit(app)

    @app.get("/plain/<key>")
    def plain(key: str) -> str:
        return key

    @app.get("/locked/<key>")
    @lock_route("k:{key}")
    def locked(key: str) -> str:
        return key

    return app


def gunicorn(url: str, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Serve :func:`create_app` with 2 workers x 4 gthread threads, locking on ``url``."""
    return start_gunicorn(
        "benchmarks.flask_route:create_app()",
        ["-w", "2", "--threads", "4", "-k", "gthread"],
        {"BENCH_LOCKKIT_URL": url},
        "/locked/warmup",
        log,
        ROOT,
    )


#: a locked request on Redis may add this many times a bare SET NX PX + compare-and-delete
FLOOR_BUDGET = 1.2
#: what a route no rule matches may add, in microseconds at p50
NO_RULE_BUDGET_US = 5.0


def in_process(requests: int, rounds: int) -> int:
    """The in-process table (Redis, server and this process pinned to one CPU); exit 1 if
    a budget is missed."""
    from .flask_inprocess import FLOOR_ROW, measure
    from .machine import choose_pinnings, pin_self
    from .servers import redis_server

    (pinning,) = choose_pinnings(("same",))
    with redis_server(pinning.server_cpu) as server:
        allowed = os.sched_getaffinity(0)
        pin_self(pinning.client_cpu)
        try:
            rows, floor = measure(server.url, requests, rounds, server.pid)
        finally:
            os.sched_setaffinity(0, allowed)
    print(
        f"In process: app.wsgi_app, {requests} requests x {rounds} rotating batches; "
        f"microseconds per request; {pinning.note}"
    )
    print(f"{'':11} {'mean':>8} {'p50':>8} {'p99':>8} {'+p50':>8} {'cpu':>8} {'+cpu':>8}")
    for row in rows:
        print(
            f"{row.name:11} {row.mean:8.1f} {row.p50:8.1f} {row.p99:8.1f} {row.added_p50:8.1f} "
            f"{row.cpu:8.1f} {row.added_cpu:8.1f}"
        )
    missed = []
    no_rule = next(r for r in rows if r.name == "no rule")
    locked = next(r for r in rows if r.name == "locked")
    if no_rule.added_p50 > NO_RULE_BUDGET_US:
        missed.append(f"a route no rule matches adds {no_rule.added_p50:.1f} us")
    by_hand = next((r for r in rows if r.name == FLOOR_ROW), None)
    if floor is not None and by_hand is not None:
        ratio = locked.added_p50 / by_hand.added_p50
        print(
            f"floor: bare redis-py SET NX PX + compare-and-delete, by hand in a view of the "
            f"bare app, adds {by_hand.added_p50:.1f} us p50; the locked route adds {ratio:.2f}x "
            f"that (budget {FLOOR_BUDGET}x)"
        )
        print(
            f"       the same cycles in a tight loop: p50 {floor.p50:.1f} us; the locked route "
            f"adds {locked.added_p50 / floor.p50:.2f}x that (caches warm: see "
            "benchmarks.redis_floor)"
        )
        print(
            f"       CPU (this process + redis-server, per request): the locked route adds "
            f"{locked.added_cpu:.1f} us, the floor in a view {by_hand.added_cpu:.1f} us "
            f"({locked.added_cpu / by_hand.added_cpu:.2f}x), in a tight loop {floor.cpu:.1f} us"
        )
        if ratio > FLOOR_BUDGET:
            missed.append(f"the locked route adds {ratio:.2f}x the redis-py floor")
    for line in missed:
        print(f"over budget: {line}")
    return 1 if missed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description="Per-request overhead of @lock_route.")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--only", choices=["file", "redis", "in-process"])
    parser.add_argument("--python-client", action="store_true", help="do not use wrk")
    parser.add_argument("--requests", type=int, default=500, help="in-process batch size")
    parser.add_argument("--in-rounds", type=int, default=20, help="in-process batches")
    args = parser.parse_args()
    if args.only == "in-process":
        return in_process(args.requests, args.in_rounds)
    use_wrk = shutil.which("wrk") is not None and not args.python_client
    results: list[Result] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-flask-")))
        backends = {"file": f"file://{tmp}/locks"}
        if args.only != "file":
            backends["redis"] = stack.enter_context(RedisServer()).url
        if args.only == "redis":
            del backends["file"]
        for backend, url in backends.items():
            process, port = gunicorn(url, tmp / f"gunicorn-{backend}.log")
            try:
                for route in ("plain", "locked", "plain", "locked"):  # second round is kept
                    if use_wrk:
                        result = run_wrk(port, route, args.seconds, args.connections, tmp)
                    else:
                        result = run_python(port, route, args.seconds, args.connections)
                    results.append(replace(result, backend=backend))
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(10)
    kept = [r for i, r in enumerate(results) if i % 4 >= 2]
    tool = "wrk -t2" if use_wrk else "Python client"
    print(
        f"gunicorn 2 workers x 4 gthread threads; {tool}, {args.connections} keep-alive "
        f"connections, {args.seconds:g} s per row; {os.cpu_count()} CPUs"
    )
    print(
        f"{'backend':8} {'route':7} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6}"
        f" {'+p50 ms':>8} {'throughput':>10}"
    )
    plain: dict[str, Result] = {}
    for r in kept:
        extra = ""
        if r.route == "plain":
            plain[r.backend] = r
        else:
            base = plain[r.backend]
            extra = f"{r.p50_ms - base.p50_ms:8.2f} {r.per_second / base.per_second:10.0%}"
        print(
            f"{r.backend:8} {r.route:7} {r.per_second:8.0f} {r.p50_ms:7.2f} {r.p99_ms:7.2f} "
            f"{r.errors:6d} {extra}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
