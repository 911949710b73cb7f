"""Shared fixtures: one real redis-server per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockkit_core.testing import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server on a free loopback port for the whole session, stopped at the end."""
    server = RedisServer()
    try:
        yield server
    finally:
        server.close()
