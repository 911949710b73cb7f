"""``python -m benchmarks.postgres_locks [--quick]`` (or ``scripts/bench-postgres``):
``postgresql://`` against a bare ``pg_advisory_lock`` on one real PostgreSQL started for the run.

1. uncontended acquire+release of one key in one process, the server and the client pinned
   to one CPU: latency and round trips per cycle (counted from libpq's protocol trace on one
   more cycle: one ReadyForQuery per round trip), for a bare ``pg_advisory_lock`` +
   ``pg_advisory_unlock`` on one connection, django-pglock's ``advisory()``, lockkit's backend
   calls, a ``kit.lock()`` handle and ``?mode=advisory``; then each lease-table statement
   alone and variants of it (no NOTIFY, no ordering lock) against a ``SELECT 1`` round trip;
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
import os
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from lockkit_core.testing import PostgresServer

from . import report
from .handoffs import Cycle, contend
from .machine import load_average, pin_all_threads, pin_self
from .probes import Probe, measure, whole
from .report import Column

DB = "bench"
TTL = 10.0
INT8_OID = 20


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


def _pool_connection(backend: Any) -> Any:
    """The one connection the backend's pool hands out (the bench calls from one thread)."""
    pool = backend._pool
    conn, _ = pool.take("bench")
    pool.give(conn)
    return conn


def _pglock_cycle(url: str) -> tuple[Cycle, Any]:
    """django-pglock's ``advisory`` context manager on Django's own connection to ``url``."""
    import django
    from django.conf import settings as django_settings
    from django.db import connections
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(url)
    if not django_settings.configured:
        django_settings.configure(
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.postgresql",
                    "HOST": info["host"],
                    "PORT": info["port"],
                    "USER": info["user"],
                    "NAME": info["dbname"],
                }
            },
            USE_TZ=True,
        )
        django.setup()
    import pglock

    connection = connections["default"]
    connection.ensure_connection()

    def cycle() -> None:
        with pglock.advisory("bench:pglock"):
            pass

    return cycle, connection.connection


def uncontended(url: str, settings: Settings) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The whole cycles (ratios to the bare advisory cycle), and each lease-table statement
    alone with variants of it (ratios to a ``SELECT 1`` round trip), measured in turns."""
    from lockkit_core import LockKit
    from lockkit_core.backends.sql import PostgresBackend

    conn = _connect(url)

    def advisory() -> None:
        conn.execute("SELECT pg_advisory_lock(42)")
        conn.execute("SELECT pg_advisory_unlock(42)")

    floor, floor_conn = _libpq_cycle(url)

    pglock_cycle, pglock_conn = _pglock_cycle(url)
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

    bare()  # the pool holds one connection from here on
    advisory_kit = LockKit(url + "?mode=advisory")
    advisory_lock = advisory_kit.lock("bench:a")

    def advisory_handle() -> None:
        advisory_lock.acquire()
        advisory_lock.release()

    advisory_handle()  # its one-time pooler check, and the pool's one connection
    advisory_backend = advisory_kit.backend

    def advisory_calls() -> None:
        advisory_backend.try_acquire("bench:ab", owner, TTL)
        advisory_backend.release("bench:ab", owner)

    probes = [
        Probe("pg_advisory_lock + unlock (one connection)", whole(advisory), conn),
        Probe("the same, prepared, straight through libpq", whole(floor), floor_conn),
        Probe("django-pglock advisory()", whole(pglock_cycle), pglock_conn),
        Probe("lockkit postgresql:// backend calls", whole(bare), _pool_connection(backend)),
        Probe("lockkit postgresql:// kit.lock()", whole(handle), _pool_connection(backend)),
        Probe(
            "lockkit postgresql://?mode=advisory backend calls",
            whole(advisory_calls),
            _pool_connection(advisory_backend),
        ),
        Probe(
            "lockkit postgresql://?mode=advisory kit.lock()",
            whole(advisory_handle),
            _pool_connection(advisory_backend),
        ),
    ]
    parts = _statement_probes(url, backend)
    rows = measure(probes + parts, settings.cycles, settings.warmup)
    kit.close()
    advisory_kit.close()
    conn.close()
    floor_conn.close()
    cycles, statements = rows[: len(probes)], rows[len(probes) :]
    cycles = report.with_ratio(cycles, cycles[0]["library"], "p50_us", "vs_advisory")
    return (
        report.with_ratio(cycles, cycles[0]["library"], "cpu_us", "cpu_vs_advisory"),
        report.with_ratio(statements, statements[0]["library"], "p50_us", "vs_advisory"),
    )


def _libpq_cycle(url: str) -> tuple[Cycle, Any]:
    """The floor of an advisory cycle in Python: both statements prepared on the connection,
    the id sent in binary, through psycopg's libpq wrapper without its cursor (what
    ``?mode=advisory`` runs, without lockkit's bookkeeping around it)."""
    from psycopg.generators import execute

    conn = _connect(url)
    pgconn = conn.pgconn
    pgconn.prepare(b"floor_lock", b"SELECT pg_advisory_lock($1)", [INT8_OID])
    pgconn.prepare(b"floor_unlock", b"SELECT pg_advisory_unlock($1)", [INT8_OID])
    lock_id = [(44).to_bytes(8, "big", signed=True)]

    def cycle() -> None:
        pgconn.send_query_prepared(b"floor_lock", lock_id, [1], 1)
        conn.wait(execute(pgconn))
        pgconn.send_query_prepared(b"floor_unlock", lock_id, [1], 1)
        conn.wait(execute(pgconn))

    return cycle, conn


def _statement_probes(url: str, backend: Any) -> list[Probe]:
    """Where the lease table's cycle goes: its two statements, and variants of them (without
    the NOTIFY of a release, without the lock that orders fence draws), each prepared on one
    connection of its own, against the floor of a prepared ``SELECT 1`` round trip."""
    owner = secrets.token_hex(16)
    acquire_sql, acquire_params = backend.acquire_statement("bench:b", owner, TTL)
    release_sql, release_params = backend.release_statement("bench:b", owner)
    t = backend.table
    quiet_release = release_sql.replace("pg_notify(%(channel)s, '')", "NULL")
    unordered_acquire = acquire_sql.replace(
        f"(SELECT nextval('{t}_fence') FROM "
        "(SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))) AS ordered)",
        f"nextval('{t}_fence')",
    )
    assert quiet_release != release_sql and unordered_acquire != acquire_sql
    conn = _connect(url)
    conn.prepare_threshold = 0

    def run(sql: str, params: Any) -> None:
        conn.execute(sql, params).fetchall()

    def statement(sql: str, params: Any) -> Callable[[], float]:
        return whole(lambda: run(sql, params))

    def advisory_lock() -> float:  # then unlocked (untimed): 42 is the cycles' key
        took = whole(lambda: run("SELECT pg_advisory_lock(43)", None))()
        run("SELECT pg_advisory_unlock(43)", None)
        return took

    def acquire(sql: str) -> Callable[[], float]:
        def timed() -> float:  # then released (untimed), so that every acquire takes the key
            took = whole(lambda: run(sql, acquire_params))()
            run(quiet_release, release_params)
            return took

        return timed

    def release(sql: str) -> Callable[[], float]:
        def timed() -> float:  # acquired first (untimed), so that every release frees the key
            run(acquire_sql, acquire_params)
            return whole(lambda: run(sql, release_params))()

        return timed

    run(acquire_sql, acquire_params)
    run(release_sql, release_params)
    conn.execute("SELECT pg_advisory_unlock_all()")
    return [
        Probe("SELECT 1 (one round trip)", statement("SELECT 1", None), conn),
        Probe("SELECT pg_advisory_lock(43)", advisory_lock, conn),
        Probe("acquire (lease table)", acquire(acquire_sql), conn),
        Probe("acquire without the ordering xact lock", acquire(unordered_acquire), conn),
        Probe("release (lease table, with NOTIFY)", release(release_sql), conn),
        Probe("release without pg_notify", release(quiet_release), conn),
    ]


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
    return contend(
        name,
        HANDLES[name],
        url,
        processes=settings.processes,
        seconds=settings.seconds,
        hold=settings.hold,
        statements=lambda: _settled_transactions(server),
    )


UNCONTENDED_COLUMNS = (
    Column("", lambda r: r["library"], left=True),
    Column("mean us", report._number("mean_us")),
    Column("p50 us", report._number("p50_us")),
    Column("p99 us", report._number("p99_us")),
    Column("p50 vs advisory", report._number("vs_advisory", 2)),
    Column("round trips", report._number("round_trips", 0)),
)
#: the whole cycles also show the client's CPU time per cycle, which a loaded machine
#: inflates far less than wall time (the statement rows' slices hold untimed work)
CYCLE_COLUMNS = (
    *UNCONTENDED_COLUMNS[:5],
    Column("client CPU us", report._number("cpu_us")),
    Column("CPU vs advisory", report._number("cpu_vs_advisory", 2)),
    UNCONTENDED_COLUMNS[5],
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
        # The uncontended rows on one CPU, the server's backends (forked from the postmaster
        # from now on) and this process alike: where a process lands changes a loopback round
        # trip severalfold on a small machine, so every row gets the same pinning.
        cpus = os.sched_getaffinity(0)
        assert server.pid is not None
        cpu = min(cpus)
        pin_all_threads(server.pid, cpu)
        pin_self(cpu)
        load = load_average()
        print(f"pinned: server and client on CPU {cpu}; load average {load}")
        cycles, statements = uncontended(url, settings)
        print(
            report.render_table("uncontended acquire+release, one process", CYCLE_COLUMNS, cycles)
        )
        print()
        print(
            report.render_table(
                "one statement at a time, prepared, on one connection "
                "(the ratio column: to SELECT 1)",
                UNCONTENDED_COLUMNS,
                statements,
            )
        )
        for pid in (server.pid, os.getpid()):
            os.sched_setaffinity(pid, cpus)  # the contention below runs unpinned
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
