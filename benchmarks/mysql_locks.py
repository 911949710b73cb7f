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
import functools
import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockkit_core.testing.mariadb import MariaDBServer

from . import report
from .handoffs import Cycle, contend
from .report import Column

VARIANTS = ("waiting room (GET_LOCK queue)", "backoff only")


@dataclass(frozen=True)
class Settings:
    processes: int = 8
    seconds: float = 3.0
    hold: float = 0.0005


QUICK = Settings(processes=4, seconds=1.0)


def _handle(variant: str, url: str) -> tuple[Cycle, Cycle]:
    """One process's acquire and release of ``mysql://``, waiting as ``variant`` says."""
    from lockkit_core import LockKit
    from lockkit_core.backends.base import SleepWaiter, Waiter

    kit = LockKit(url, ttl=10.0)
    if variant == "backoff only":

        def backoff(key: str, owner: str, fair: bool) -> Waiter:
            return SleepWaiter()

        kit.backend.waiter = backoff  # type: ignore[method-assign]
    lock = kit.lock("bench:c")

    def acquire() -> None:
        lock.acquire()

    return acquire, lock.release


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
    readings = itertools.count()  # each reading is a statement too: leave the earlier ones out
    return contend(
        variant,
        functools.partial(_handle, variant),
        server.url,
        processes=settings.processes,
        seconds=settings.seconds,
        hold=settings.hold,
        statements=lambda: _questions(server) - next(readings),
    )


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
