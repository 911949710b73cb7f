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

import gc
import itertools
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from flask import Flask
from werkzeug.test import EnvironBuilder

from lockkit_flask import LockKit, lock_route

from .redis_floor import Floor
from .stats import percentile

__all__ = ["FLOOR_ROW", "Row", "measure"]

_numbers = itertools.count(1)


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


def _batch(app: Flask, route: str, requests: int) -> list[float]:
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
    for environ in environs:
        started = clock()
        body: Iterable[bytes] = wsgi(environ, start_response)
        for _ in body:
            pass
        getattr(body, "close", lambda: None)()
        took.append((clock() - started) / 1000.0)
    bad = [s for s in statuses if not s.startswith("200")]
    if bad:
        raise RuntimeError(f"/{route}/ answered {bad[0]} ({len(bad)} of {requests} requests)")
    return took


@dataclass(frozen=True)
class Row:
    """p50 and mean of one series (microseconds), and what it adds over the bare app."""

    name: str
    mean: float
    p50: float
    p99: float
    added_p50: float


#: The row of the floor locked by hand in a view of the bare app (Redis only).
FLOOR_ROW = "floor, view"


def measure(url: str, requests: int, rounds: int) -> tuple[list[Row], float | None]:
    """Rows for the bare app, a route no rule matches, a locked route and (on Redis) the
    floor by hand in a view; the p50 of the floor in a tight loop (None unless Redis)."""
    floor = Floor(url) if url.startswith("redis") else None
    bare, app = _apps(url, floor)
    series = {"bare app": (bare, "plain"), "no rule": (app, "plain"), "locked": (app, "locked")}
    if floor is not None:
        series[FLOOR_ROW] = (bare, "floor")
    for target, route in series.values():
        _batch(target, route, requests)  # warm up
    times: dict[str, list[float]] = {name: [] for name in series}
    floor_times: list[float] = []
    names = list(series)
    for i in range(rounds):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:  # rotate which goes first
            target, route = series[name]
            times[name] += _batch(target, route, requests)
        if floor is not None:
            floor_times += floor.batch(requests)
    if floor is not None:
        floor.close()
    base = percentile(sorted(times["bare app"]), 50)
    rows = []
    for name, took in times.items():
        ordered = sorted(took)
        p50 = percentile(ordered, 50)
        rows.append(Row(name, statistics.fmean(ordered), p50, percentile(ordered, 99), p50 - base))
    return rows, percentile(sorted(floor_times), 50) if floor_times else None
