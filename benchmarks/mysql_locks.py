"""``python -m benchmarks.mysql_locks [--quick]`` (or ``scripts/bench-mysql``): how
``mysql://`` waiters wait, on one real MariaDB started for the run.

``processes`` processes contend for one key, with the waiting ``mysql://`` ships (one waiter
per key backs off and tries, the others queue inside the server on a ``GET_LOCK`` waiting
room) and with bounded backoff alone (every waiter polls, 0.5 ms to 50 ms): grants per second,
hand-off latency (release to the next holder's return from acquire, when it was waiting
already), overlaps, and statements per grant (the server's ``Questions`` counter).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockkit_core.testing.mariadb import MariaDBServer

from . import report
from .machine import spin
from .report import Column
from .stats import Section, percentile, section_stats

_SPAWN = multiprocessing.get_context("spawn")
VARIANTS = ("waiting room (GET_LOCK queue)", "backoff only")


@dataclass(frozen=True)
class Settings:
    processes: int = 8
    seconds: float = 3.0
    hold: float = 0.0005


QUICK = Settings(processes=4, seconds=1.0)


def _child(variant: str, url: str, settings: Settings, barrier: Any, results: Any) -> None:
    import os

    from lockkit_core import LockKit
    from lockkit_core.backends.base import SleepWaiter, Waiter

    try:
        kit = LockKit(url, ttl=10.0)
        if variant == "backoff only":

            def backoff(key: str, owner: str, fair: bool) -> Waiter:
                return SleepWaiter()

            kit.backend.waiter = backoff  # type: ignore[method-assign]
        lock = kit.lock("bench:c")
        lock.acquire()
        lock.release()
        barrier.wait(60)
        start = time.monotonic()
        sections: list[Section] = []
        while (asked := time.monotonic()) < start + settings.seconds:
            lock.acquire()
            got = time.monotonic()
            spin(settings.hold)
            done = time.monotonic()
            lock.release()
            sections.append((asked, got, done, os.getpid()))
        kit.close()
        results.put((start, sections, None))
    except BaseException as exc:
        barrier.abort()
        results.put((0.0, [], f"{type(exc).__name__}: {exc}"))


def _questions(server: MariaDBServer) -> int:
    import pymysql

    conn = pymysql.connect(host=server.host, port=server.port, user=server.user)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
            return int(cursor.fetchone()[1])
    finally:
        conn.close()


def contention(variant: str, server: MariaDBServer, settings: Settings) -> dict[str, Any]:
    before = _questions(server)
    barrier = _SPAWN.Barrier(settings.processes)
    results = _SPAWN.Queue()
    workers = [
        _SPAWN.Process(
            target=_child, args=(variant, server.url, settings, barrier, results), daemon=True
        )
        for _ in range(settings.processes)
    ]
    for worker in workers:
        worker.start()
    got = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
    errors = [error for _, _, error in got if error]
    if errors:
        return {"library": variant, "error": errors[0]}
    statements = _questions(server) - before - 1
    sections = [s for _, found, _ in got for s in found]
    start = min(start for start, _, _ in got)
    stats = section_stats([(sections, start)], settings.seconds, settings.processes)
    ordered = sorted(sections, key=lambda s: s[1])
    handoffs = sorted(
        (b[1] - a[2]) * 1e3 for a, b in itertools.pairwise(ordered) if a[3] != b[3] and b[0] < a[2]
    )
    return {
        "library": variant,
        "grants": stats.sections,
        "per_second": stats.per_second,
        "handoff_p50_ms": percentile(handoffs, 50),
        "handoff_p99_ms": percentile(handoffs, 99),
        "overlaps": stats.overlaps,
        # set-up, warm-up and connection statements of each process included
        "statements_per_grant": statements / max(1, stats.sections),
    }


COLUMNS = (
    Column("", lambda r: r["library"], left=True),
    Column("grants", report._number("grants", 0)),
    Column("grants/s", report._number("per_second", 0)),
    Column("hand-off p50 ms", report._number("handoff_p50_ms", 2)),
    Column("hand-off p99 ms", report._number("handoff_p99_ms", 2)),
    Column("overlaps", report._number("overlaps", 0)),
    Column("statements/grant", report._number("statements_per_grant", 2)),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-mysql", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 4 processes, 1 s")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    with MariaDBServer() as server:
        rows = [contention(variant, server, settings) for variant in VARIANTS]
    title = (
        f"{settings.processes} processes contending for one key on MariaDB, "
        f"{settings.hold * 1e3:g} ms held, {settings.seconds:g} s"
    )
    print(report.render_table(title, COLUMNS, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
