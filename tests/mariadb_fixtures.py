"""A real MariaDB for the session (``mariadb_server``), started only by tests that use it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockkit_core.testing.mariadb import MariaDBServer


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDBServer]:
    """A MariaDB server on a free loopback port for the whole session, stopped at the end."""
    server = MariaDBServer()
    try:
        yield server
    finally:
        server.close()
