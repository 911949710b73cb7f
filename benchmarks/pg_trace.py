"""Count round trips to PostgreSQL from libpq's own protocol trace (the benchmark and the tests).

Every round trip ends with one ReadyForQuery from the server (after a simple Query, or after
the Sync that closes an extended-protocol exchange), so counting those counts round trips.
The backend's pool is left holding one traced connection, which every call then uses."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from psycopg.pq import Trace

from lockkit_core.backends.sql import PostgresBackend


class RoundTrips:
    """The trace file of one connection; :meth:`count` is the round trips so far."""

    def __init__(self, path: str) -> None:
        self.path = path

    def count(self) -> int:
        with open(self.path) as trace:
            return sum(1 for line in trace if "\tReadyForQuery\t" in line)


@contextmanager
def traced_connection(conn: Any) -> Iterator[RoundTrips]:
    """Trace ``conn`` (a psycopg connection) while the block runs."""
    fd, path = tempfile.mkstemp(prefix="lockkit-pgtrace-")
    try:
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        yield RoundTrips(path)
        conn.pgconn.untrace()
    finally:
        os.close(fd)
        os.unlink(path)


@contextmanager
def traced(backend: PostgresBackend) -> Iterator[RoundTrips]:
    """Trace the one connection the backend's pool hands out meanwhile (one thread only)."""
    pool: Any = backend._pool
    conn, _ = pool.take("trace")
    with traced_connection(conn) as trips:
        pool.give(conn)
        yield trips
