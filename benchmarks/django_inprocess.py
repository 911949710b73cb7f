"""``LockMiddleware`` measured inside one process, through Django's WSGI handler.

Over HTTP, the noise of a run is larger than the few microseconds the middleware may cost on
a path no rule matches; here the same requests go straight into two ``WSGIHandler``s, one
built with ``LockMiddleware`` in ``MIDDLEWARE`` and one without, in alternating batches
(a burst of load elsewhere hits both alike), and each request is timed on its own. Each
request's WSGI environ is built before its clock starts; the clock covers what a WSGI server
calls: ``handler(environ, start_response)`` and ``response.close()``.

Needs Django configured (``benchmarks.django_settings``, or any settings: the routes, the
middleware and ``LOCKKIT`` are overridden here).
"""

from __future__ import annotations

import gc
import itertools
import math
import statistics
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.handlers.wsgi import WSGIHandler
from django.test import RequestFactory, override_settings

from . import django_urls
from .django_settings import LOCK_MIDDLEWARE, lockkit_settings
from .machine import CpuClock
from .redis_floor import Floor
from .redis_monitor import CommandCounter
from .stats import percentile

__all__ = ["Case", "InProcess", "cases", "measure"]

_ROUTES = "benchmarks.django_urls"


@dataclass(frozen=True)
class Case:
    """One comparison: ``route`` with and without the middleware, locking on ``url``."""

    name: str
    route: str
    url: str


@dataclass(frozen=True)
class InProcess:
    """Per-request times of one case (microseconds), and the Redis commands each request sent
    (None: not a Redis store)."""

    case: Case
    requests: int
    without_mean: float
    without_p50: float
    with_mean: float
    with_p50: float
    with_p99: float
    commands_per_request: float | None
    commands: dict[str, float]
    floor_p50: float | None = None
    #: what locking by hand (the floor) adds to the view, in a request of the bare handler
    floor_in_view: float | None = None
    #: CPU per request (this process + redis-server) the middleware adds; the floor's per
    #: cycle in a tight loop; what the floor adds by hand in the view
    cpu_overhead: float = math.nan
    floor_cpu: float | None = None
    floor_cpu_in_view: float | None = None

    @property
    def mean_overhead(self) -> float:
        """Mean time the middleware added to a request, in microseconds."""
        return self.with_mean - self.without_mean

    @property
    def p50_overhead(self) -> float:
        """What the middleware added to the median request, in microseconds."""
        return self.with_p50 - self.without_p50

    @property
    def floor_ratio(self) -> float | None:
        """The added p50 over what a bare redis-py SET NX PX + compare-and-delete cycle adds
        to the same view done by hand (requests of the handler without the middleware)."""
        return None if self.floor_in_view is None else self.p50_overhead / self.floor_in_view

    @property
    def tight_floor_ratio(self) -> float | None:
        """The added p50 over the p50 of the same cycles run back to back (caches warm)."""
        return None if self.floor_p50 is None else self.p50_overhead / self.floor_p50


def cases(file_url: str, redis_url: str | None) -> list[Case]:
    """The no-rule path (on Redis when there is one: it must not touch the store), then a
    matching rule on each store."""
    found = [Case("no rule matches", "plain", redis_url or file_url)]
    if redis_url is not None:
        found.append(Case("rule, redis://", "locked", redis_url))
    found.append(Case("rule, file://", "locked", file_url))
    return found


_numbers = itertools.count(1)


def _handler(with_middleware: bool) -> WSGIHandler:
    with override_settings(MIDDLEWARE=[LOCK_MIDDLEWARE] if with_middleware else []):
        return WSGIHandler()  # reads MIDDLEWARE once, here


#: what the batches count as CPU time (measure() adds redis-server's)
_CPU = CpuClock()


def _batch(
    handler: WSGIHandler, route: str, requests: int, cpu: list[float] | None = None
) -> list[float]:
    """Each request's wall time (microseconds); ``cpu`` gets the batch's CPU time per
    request."""
    factory = RequestFactory()
    environs = [factory.get(f"/{route}/{next(_numbers)}").environ for _ in range(requests)]
    statuses: list[str] = []

    def start_response(status: str, headers: object, exc_info: object = None) -> None:
        statuses.append(status)

    gc.collect()
    took = []
    clock = time.perf_counter_ns
    used = _CPU.read()
    for environ in environs:
        started = clock()
        handler(environ, start_response).close()  # type: ignore[arg-type]
        took.append((clock() - started) / 1000.0)
    if cpu is not None:
        cpu.append((_CPU.read() - used) / requests / 1000.0)
    bad = [s for s in statuses if not s.startswith("200")]
    if bad:
        raise RuntimeError(f"/{route}/ answered {bad[0]} ({len(bad)} of {requests} requests)")
    return took


def _count(
    case: Case, handler: WSGIHandler, requests: int
) -> tuple[float | None, dict[str, float]]:
    parts = urlsplit(case.url)
    if parts.scheme != "redis":
        return None, {}
    with CommandCounter(parts.port or 6379, parts.hostname or "127.0.0.1") as seen:
        _batch(handler, case.route, requests)
    per = {name: calls / requests for name, calls in sorted(seen.commands.items())}
    return seen.total / requests, per


def measure(case: Case, requests: int, rounds: int, server_pid: int | None = None) -> InProcess:
    """``rounds`` batches of ``requests`` per handler, alternating which goes first (on Redis
    with a batch of bare SET NX PX + compare-and-delete cycles between them, the floor); then
    one more batch with the middleware under MONITOR, to count the Redis commands. The floor
    is also timed by hand in the view (``/floor/<n>``) of the handler without the middleware.
    CPU time per request counts this process and, given its ``server_pid``, redis-server.
    """
    _CPU.server_pid = server_pid
    on_redis = case.route == "locked" and case.url.startswith("redis")
    floor = Floor(case.url, server_pid) if on_redis else None
    floor_times: list[float] = []
    by_hand: list[float] = []
    cpu: dict[str, list[float]] = {"on": [], "off": [], "floor": [], "by hand": []}

    django_urls.FLOOR = floor
    with override_settings(
        ROOT_URLCONF=_ROUTES, ALLOWED_HOSTS=["*"], LOCKKIT=lockkit_settings(case.url)
    ):
        with_mw, without_mw = _handler(True), _handler(False)
        _batch(with_mw, case.route, requests)  # warm up: connections, scripts, imports
        _batch(without_mw, case.route, requests)
        times: dict[bool, list[float]] = {True: [], False: []}
        for i in range(rounds):
            for mw in (True, False) if i % 2 else (False, True):
                handler = with_mw if mw else without_mw
                times[mw] += _batch(handler, case.route, requests, cpu["on" if mw else "off"])
                if floor is not None and mw:
                    floor_times += floor.batch(requests, cpu["floor"])
                    by_hand += _batch(without_mw, "floor", requests, cpu["by hand"])
        per_request, commands = _count(case, with_mw, requests)
    if floor is not None:
        django_urls.FLOOR = None
        floor.close()
    on, off = sorted(times[True]), sorted(times[False])
    return InProcess(
        case=case,
        requests=len(on),
        without_mean=statistics.fmean(off),
        without_p50=percentile(off, 50),
        with_mean=statistics.fmean(on),
        with_p50=percentile(on, 50),
        with_p99=percentile(on, 99),
        commands_per_request=per_request,
        commands=commands,
        floor_p50=percentile(sorted(floor_times), 50) if floor_times else None,
        floor_in_view=percentile(sorted(by_hand), 50) - percentile(off, 50) if by_hand else None,
        cpu_overhead=_paired(cpu["on"], cpu["off"]),
        floor_cpu=statistics.median(cpu["floor"]) if floor_times else None,
        floor_cpu_in_view=_paired(cpu["by hand"], cpu["off"]) if by_hand else None,
    )


def _paired(series: list[float], base: list[float]) -> float:
    """The median of each round's difference between ``series`` and ``base``."""
    return statistics.median(a - b for a, b in zip(series, base, strict=True))
