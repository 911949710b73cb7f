"""HTTP load for the web-framework benchmarks: a gunicorn to serve, ``wrk`` (or a threaded
Python client where wrk is missing) to load it, and what one run measured.

Every request asks for a fresh path, ``/<route>/<random number>``, so a locked route locks a
fresh key each time: what is measured is the lock's own cost, not waiting for others.
"""

from __future__ import annotations

import http.client
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lockkit_core.testing.servers import free_port

from .stats import percentile

__all__ = ["Result", "run_python", "run_wrk", "start_gunicorn"]


@dataclass(frozen=True)
class Result:
    """One load run of one route: requests, rate, latency percentiles, non-2xx answers."""

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
    """Load ``/<route>/<n>`` with ``wrk -t2`` for ``seconds``."""
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
    """Load ``/<route>/<n>`` from ``connections`` threads of ``http.client`` for ``seconds``."""
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
            if response.will_close:  # a sync worker closes after each response
                conn.close()
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


def start_gunicorn(
    app: str,
    worker_args: Sequence[str],
    env: Mapping[str, str],
    warmup_path: str,
    log: Path,
    root: Path,
) -> tuple[subprocess.Popen[bytes], int]:
    """Serve ``app`` (a gunicorn app spec) from ``root`` on a free port; return once
    ``warmup_path`` answers 200. The caller stops the process (SIGTERM)."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "--chdir",
        str(root),
        "-b",
        f"127.0.0.1:{port}",
        *worker_args,
        "--log-level",
        "warning",
        app,
    ]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", warmup_path)
            if conn.getresponse().status == 200:
                return process, port
        except OSError:
            time.sleep(0.05)
        finally:
            conn.close()
        if process.poll() is not None:
            break
    process.kill()
    process.wait(10)
    raise RuntimeError(f"gunicorn did not start: {log.read_text()}")
