"""``python -m benchmarks.postgres_locks [--quick]`` (or ``scripts/bench-postgres``):
``postgresql://`` against a bare ``pg_advisory_lock`` on one real PostgreSQL started for the run.

1. uncontended acquire+release of one key in one process: latency and round trips per cycle
   (counted from libpq's protocol trace: one ReadyForQuery per round trip), for a bare
   ``pg_advisory_lock`` + ``pg_advisory_unlock`` on one connection, lockkit's backend calls,
   and a ``kit.lock()`` handle;
2. ``processes`` processes contending for one key: hand-off latency (release to the next
   holder's return from acquire, counted when that holder was already waiting), overlaps, and
   statements per grant (the server's own transaction count for the database: every
   statement runs in autocommit, so it is one transaction).

The server runs with ``fsync`` and ``synchronous_commit`` off (the test fixture's settings),
so a commit costs no disk flush: a durable server adds one WAL flush per lockkit acquire and
release that the advisory lock (which writes nothing) does not pay.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from lockkit_core.testing import PostgresServer

from . import report
from .machine import spin
from .pg_trace import traced, traced_connection
from .report import Column
from .stats import Section, percentile, section_stats

_SPAWN = multiprocessing.get_context("spawn")
DB = "bench"
TTL = 10.0


@dataclass(frozen=True)
class Settings:
    cycles: int = 2000
    warmup: int = 100
    processes: int = 4
    seconds: float = 3.0
    hold: float = 0.0005


QUICK = Settings(cycles=300, warmup=20, seconds=1.0)


def _connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


# -- 1. uncontended ------------------------------------------------------------------------------

Cycle = Callable[[], None]


def _time(cycle: Cycle, cycles: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        cycle()
    samples = []
    for _ in range(cycles):
        started = time.perf_counter()
        cycle()
        samples.append(time.perf_counter() - started)
    return sorted(s * 1e6 for s in samples)


def _row(name: str, micros: list[float], trips: float) -> dict[str, Any]:
    return {
        "library": name,
        "mean_us": statistics.fmean(micros),
        "p50_us": percentile(micros, 50),
        "p99_us": percentile(micros, 99),
        "round_trips": trips,
    }


def uncontended(url: str, settings: Settings) -> list[dict[str, Any]]:
    from lockkit_core import LockKit
    from lockkit_core.backends.sql import PostgresBackend

    rows = []
    conn = _connect(url)

    def advisory() -> None:
        conn.execute("SELECT pg_advisory_lock(42)")
        conn.execute("SELECT pg_advisory_unlock(42)")

    with traced_connection(conn) as trips:
        micros = _time(advisory, settings.cycles, settings.warmup)
        before = trips.count()
        advisory()
        rows.append(
            _row("pg_advisory_lock + unlock (one connection)", micros, trips.count() - before)
        )
    conn.close()

    kit = LockKit(url, ttl=TTL)
    backend = kit.backend
    assert isinstance(backend, PostgresBackend)
    owner = secrets.token_hex(16)

    def bare() -> None:
        backend.try_acquire("bench:u", owner, TTL)
        backend.release("bench:u", owner)

    lock = kit.lock("bench:h")

    def handle() -> None:
        lock.acquire()
        lock.release()

    for name, cycle in (
        ("lockkit postgresql:// backend calls", bare),
        ("lockkit postgresql:// kit.lock()", handle),
    ):
        with traced(backend) as trips:
            micros = _time(cycle, settings.cycles, settings.warmup)
            before = trips.count()
            cycle()
            rows.append(_row(name, micros, trips.count() - before))
    kit.close()

    advisory_kit = LockKit(url + "?mode=advisory")
    advisory_lock = advisory_kit.lock("bench:a")
    advisory_lock.acquire()  # its one-time pooler check, before the traced connection is set
    advisory_lock.release()

    def advisory_handle() -> None:
        advisory_lock.acquire()
        advisory_lock.release()

    with traced(advisory_kit.backend) as trips:  # type: ignore[arg-type]
        micros = _time(advisory_handle, settings.cycles, settings.warmup)
        before = trips.count()
        advisory_handle()
        rows.append(
            _row("lockkit postgresql://?mode=advisory kit.lock()", micros, trips.count() - before)
        )
    advisory_kit.close()
    return report.with_ratio(rows, rows[0]["library"], "p50_us", "vs_advisory")


# -- 2. contention -------------------------------------------------------------------------------


def _lockkit_handle(url: str) -> tuple[Cycle, Cycle]:
    from lockkit_core import LockKit

    lock = LockKit(url, ttl=TTL).lock("bench:c")

    def acquire() -> None:
        lock.acquire()

    return acquire, lock.release


def _advisory_handle(url: str) -> tuple[Cycle, Cycle]:
    conn = _connect(url)

    def acquire() -> None:
        conn.execute("SELECT pg_advisory_lock(7)")

    def release() -> None:
        conn.execute("SELECT pg_advisory_unlock(7)")

    return acquire, release


HANDLES: dict[str, Callable[[str], tuple[Cycle, Cycle]]] = {
    "pg_advisory_lock (server queue)": _advisory_handle,
    "lockkit postgresql://": _lockkit_handle,
}


def _child(name: str, url: str, settings: Settings, barrier: Any, results: Any) -> None:
    import os

    try:
        acquire, release = HANDLES[name](url)
        acquire()
        release()
        barrier.wait(60)
        start = time.monotonic()
        sections: list[Section] = []
        while (asked := time.monotonic()) < start + settings.seconds:
            acquire()
            got = time.monotonic()
            spin(settings.hold)
            done = time.monotonic()
            release()
            sections.append((asked, got, done, os.getpid()))
        results.put((start, sections, None))
    except BaseException as exc:
        barrier.abort()
        results.put((0.0, [], f"{type(exc).__name__}: {exc}"))


def _transactions(server: PostgresServer) -> int:
    with _connect(server.url) as admin:
        admin.execute("SELECT pg_stat_clear_snapshot()")
        row = admin.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", (DB,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def _settled_transactions(server: PostgresServer) -> int:
    """The count once the exited sessions' statistics have reached the server."""
    last = -1
    for _ in range(50):
        now = _transactions(server)
        if now == last:
            return now
        last = now
        time.sleep(0.2)
    return last


def contention(name: str, server: PostgresServer, url: str, settings: Settings) -> dict[str, Any]:
    before = _settled_transactions(server)
    barrier = _SPAWN.Barrier(settings.processes)
    results = _SPAWN.Queue()
    workers = [
        _SPAWN.Process(target=_child, args=(name, url, settings, barrier, results), daemon=True)
        for _ in range(settings.processes)
    ]
    for worker in workers:
        worker.start()
    got = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(30)
    errors = [error for _, _, error in got if error]
    if errors:
        return {"library": name, "error": errors[0]}
    statements = _settled_transactions(server) - before
    sections = [s for _, found, _ in got for s in found]
    start = min(start for start, _, _ in got)
    stats = section_stats([(sections, start)], settings.seconds, settings.processes)
    ordered = sorted(sections, key=lambda s: s[1])
    handoffs = sorted(
        (b[1] - a[2]) * 1e3 for a, b in itertools.pairwise(ordered) if a[3] != b[3] and b[0] < a[2]
    )
    return {
        "library": name,
        "grants": stats.sections,
        "per_second": stats.per_second,
        "handoff_p50_ms": percentile(handoffs, 50),
        "handoff_p99_ms": percentile(handoffs, 99),
        "overlaps": stats.overlaps,
        # warm-up and set-up statements of each process are included: a small overcount
        "statements_per_grant": statements / max(1, stats.sections),
    }


UNCONTENDED_COLUMNS = (
    Column("", lambda r: r["library"], left=True),
    Column("mean us", report._number("mean_us")),
    Column("p50 us", report._number("p50_us")),
    Column("p99 us", report._number("p99_us")),
    Column("p50 vs advisory", report._number("vs_advisory", 2)),
    Column("round trips", report._number("round_trips", 0)),
)
CONTENTION_COLUMNS = (
    Column("", lambda r: r["library"], left=True),
    Column("grants", report._number("grants", 0)),
    Column("grants/s", report._number("per_second", 0)),
    Column("hand-off p50 ms", report._number("handoff_p50_ms", 2)),
    Column("hand-off p99 ms", report._number("handoff_p99_ms", 2)),
    Column("overlaps", report._number("overlaps", 0)),
    Column("statements/grant", report._number("statements_per_grant", 2)),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-postgres", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few cycles, 1 s")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    server = PostgresServer()
    try:
        with _connect(server.url) as admin:
            admin.execute(f"CREATE DATABASE {DB}")
        url = f"postgresql://{server.user}@{server.host}:{server.port}/{DB}"
        print(
            report.render_table(
                "uncontended acquire+release, one process",
                UNCONTENDED_COLUMNS,
                uncontended(url, settings),
            )
        )
        rows = [contention(name, server, url, settings) for name in HANDLES]
        print()
        print(
            report.render_table(
                f"{settings.processes} processes contending for one key, "
                f"{settings.hold * 1e3:g} ms held, {settings.seconds:g} s",
                CONTENTION_COLUMNS,
                rows,
            )
        )
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
