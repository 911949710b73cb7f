"""Per-request cost of ``@lock_route`` under a real WSGI server; run ``scripts/bench-flask``.

The same tiny view is served with and without ``@lock_route`` by gunicorn (2 workers x 4
gthread threads) and loaded by ``wrk`` (or, where wrk is missing, a threaded Python client)
over keep-alive connections; every request locks a fresh key, so what is measured is the
lock's own cost (one acquire and one release on the store), not waiting for others.
The app below is also what gunicorn imports: ``benchmarks.flask_route:create_app()``.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from flask import Flask

from lockkit_core.testing.servers import RedisServer, free_port
from lockkit_flask import LockKit, lock_route

from .stats import percentile

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


@dataclass(frozen=True)
class Result:
    backend: str
    route: str
    requests: int
    per_second: float
    p50_ms: float
    p99_ms: float
    errors: int


_WRK_SCRIPT = """
math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
request = function()
  return wrk.format("GET", "/ROUTE/" .. math.random(1, 2000000000))
end
"""


def _wrk_ms(text: str, label: str) -> float:
    match = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\b", text, re.M)
    if match is None:
        return float("nan")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[match.group(2)]
    return float(match.group(1)) * scale


def run_wrk(port: int, route: str, seconds: float, connections: int, tmp: Path) -> Result:
    script = tmp / f"{route}.lua"
    script.write_text(_WRK_SCRIPT.replace("ROUTE", route))
    out = subprocess.run(
        [
            "wrk",
            "-t2",
            f"-c{connections}",
            f"-d{seconds:g}s",
            "--latency",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return Result(
        "",
        route,
        total,
        rate,
        _wrk_ms(out, "50"),
        _wrk_ms(out, "99"),
        int(errors.group(1)) if errors else 0,
    )


def run_python(port: int, route: str, seconds: float, connections: int) -> Result:
    latencies: list[float] = []
    errors = 0
    guard = threading.Lock()
    stop = time.monotonic() + seconds

    def client() -> None:
        nonlocal errors
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        bad = 0
        while time.monotonic() < stop:
            started = time.perf_counter()
            conn.request("GET", f"/{route}/{random.getrandbits(60)}")
            response = conn.getresponse()
            response.read()
            mine.append(time.perf_counter() - started)
            bad += response.status != 200
        conn.close()
        with guard:
            latencies.extend(mine)
            errors += bad

    threads = [threading.Thread(target=client) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ordered = sorted(latencies)
    return Result(
        "",
        route,
        len(ordered),
        len(ordered) / seconds,
        percentile(ordered, 50) * 1000,
        percentile(ordered, 99) * 1000,
        errors,
    )


def gunicorn(url: str, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "--chdir",
        str(ROOT),
        "-b",
        f"127.0.0.1:{port}",
        "-w",
        "2",
        "--threads",
        "4",
        "-k",
        "gthread",
        "--log-level",
        "warning",
        "benchmarks.flask_route:create_app()",
    ]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command,
            env={**os.environ, "BENCH_LOCKKIT_URL": url},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/locked/warmup")
            if conn.getresponse().status == 200:
                return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"gunicorn did not start: {log.read_text()}")


def main() -> int:
    parser = argparse.ArgumentParser(description="Per-request overhead of @lock_route.")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--only", choices=["file", "redis"])
    parser.add_argument("--python-client", action="store_true", help="do not use wrk")
    args = parser.parse_args()
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
