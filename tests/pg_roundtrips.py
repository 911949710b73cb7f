"""Count the round trips a ``postgresql://`` backend makes, from libpq's own protocol trace.

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
    def __init__(self, path: str) -> None:
        self.path = path

    def count(self) -> int:
        with open(self.path) as trace:
            return sum(1 for line in trace if "\tReadyForQuery\t" in line)


@contextmanager
def traced(backend: PostgresBackend) -> Iterator[RoundTrips]:
    """Trace the one connection the backend's pool will hand out meanwhile."""
    pool: Any = backend._pool
    conn, _ = pool.take("trace")
    fd, path = tempfile.mkstemp(prefix="lockkit-pgtrace-")
    try:
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        pool.give(conn)
        yield RoundTrips(path)
        conn.pgconn.untrace()
    finally:
        os.close(fd)
        os.unlink(path)
