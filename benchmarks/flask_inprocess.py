"""``@lock_route`` measured inside one process, through the app's WSGI callable.

Over HTTP the noise is larger than what a route no rule matches may cost. Here the same
requests go straight into ``app.wsgi_app`` of two apps in alternating batches: a bare Flask
app, and one with the lockkit extension (its hooks run on every request) serving the same
view plain and under ``@lock_route`` on a fresh key per request. On Redis the floor (bare
redis-py SET NX PX + compare-and-delete, :mod:`.redis_floor`) is measured twice between them:
in a tight loop, and by hand in a view of the bare app (``/floor/<key>``; its added p50 over
the bare app's plain route is the floor a locked route compares with, request for request).
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import math
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flask import Flask
from werkzeug.test import EnvironBuilder

from lockkit_flask import LockKit, lock_route

from .machine import CpuClock
from .redis_floor import Floor
from .stats import percentile

__all__ = ["FLOOR_ROW", "FloorTimes", "Row", "measure"]

_numbers = itertools.count(1)
#: what the batches count as CPU time (measure() adds redis-server's)
_CPU = CpuClock()


def _apps(url: str, floor: Floor | None = None) -> tuple[Flask, Flask]:
    bare = Flask("bare")

    @bare.get("/plain/<key>")
    def plain(key: str) -> str:
        return key

    if floor is not None:
        cycle = floor.cycle

        @bare.get("/floor/<key>")
        def by_hand(key: str) -> str:
            cycle(f"floor:view:{key}")
            return key

    app = Flask("with_lockkit")
    app.config["LOCKKIT_URL"] = url
    LockKit(app)

    @app.get("/plain/<key>")
    def plain_too(key: str) -> str:
        return key

    @app.get("/locked/<key>")
    @lock_route("k:{key}")
    def locked(key: str) -> str:
        return key

    return bare, app


def _batch(app: Flask, route: str, requests: int, cpu: list[float] | None = None) -> list[float]:
    """Each request's wall time (microseconds); ``cpu`` gets the batch's CPU time per request
    (``cpu[0]`` is the :class:`CpuClock` reading before, replaced by the result)."""
    environs = [
        EnvironBuilder(path=f"/{route}/{next(_numbers)}").get_environ() for _ in range(requests)
    ]
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        statuses.append(status)

    gc.collect()
    took = []
    clock = time.perf_counter_ns
    wsgi = app.wsgi_app
    used = _CPU.read()
    for environ in environs:
        started = clock()
        body: Iterable[bytes] = wsgi(environ, start_response)
        for _ in body:
            pass
        getattr(body, "close", lambda: None)()
        took.append((clock() - started) / 1000.0)
    if cpu is not None:
        cpu.append((_CPU.read() - used) / requests / 1000.0)
    bad = [s for s in statuses if not s.startswith("200")]
    if bad:
        raise RuntimeError(f"/{route}/ answered {bad[0]} ({len(bad)} of {requests} requests)")
    return took


@dataclass(frozen=True)
class Row:
    """p50 and mean of one series (microseconds), and what it adds over the bare app; its CPU
    time per request (this process and redis-server: the median of the batches' means) and
    what that adds (the median of each round's difference from the bare app's batch)."""

    name: str
    mean: float
    p50: float
    p99: float
    added_p50: float
    cpu: float = math.nan
    added_cpu: float = math.nan


@dataclass(frozen=True)
class FloorTimes:
    """The floor's cycles in a tight loop: wall p50 and CPU per cycle (microseconds)."""

    p50: float
    cpu: float


#: The row of the floor locked by hand in a view of the bare app (Redis only).
FLOOR_ROW = "floor, view"


def measure(
    url: str, requests: int, rounds: int, server_pid: int | None = None
) -> tuple[list[Row], FloorTimes | None]:
    """Rows for the bare app, a route no rule matches, a locked route and (on Redis) the
    floor by hand in a view; the floor in a tight loop (None unless Redis). CPU time counts
    this process and, given its ``server_pid``, redis-server."""
    _CPU.server_pid = server_pid
    floor = Floor(url, server_pid) if url.startswith("redis") else None
    bare, app = _apps(url, floor)
    series = {"bare app": (bare, "plain"), "no rule": (app, "plain"), "locked": (app, "locked")}
    if floor is not None:
        series[FLOOR_ROW] = (bare, "floor")
    for target, route in series.values():
        _batch(target, route, requests)  # warm up
    times: dict[str, list[float]] = {name: [] for name in series}
    cpu: dict[str, list[float]] = {name: [] for name in series}
    floor_times: list[float] = []
    floor_cpu: list[float] = []
    names = list(series)
    for i in range(rounds):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:  # rotate which goes first
            target, route = series[name]
            times[name] += _batch(target, route, requests, cpu[name])
        if floor is not None:
            floor_times += floor.batch(requests, floor_cpu)
    if floor is not None:
        floor.close()
    base = percentile(sorted(times["bare app"]), 50)
    rows = []
    for name, took in times.items():
        ordered = sorted(took)
        p50 = percentile(ordered, 50)
        added = [a - b for a, b in zip(cpu[name], cpu["bare app"], strict=True)]
        row = Row(name, statistics.fmean(ordered), p50, percentile(ordered, 99), p50 - base)
        rows.append(
            dataclasses.replace(
                row, cpu=statistics.median(cpu[name]), added_cpu=statistics.median(added)
            )
        )
    if not floor_times:
        return rows, None
    return rows, FloorTimes(percentile(sorted(floor_times), 50), statistics.median(floor_cpu))
