"""Shared fixtures: one real redis-server per test session; a ``file://`` store per test.

A test module that defines ``url``, ``kit`` or ``backend`` itself (the redis tests do) uses
its own; these serve the ``file://`` tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lockkit_core import LockKit
from lockkit_core.backends.file import FileBackend
from lockkit_core.registry import create_backend
from lockkit_core.testing import RedisServer

pytest_plugins = [
    "async_support",
    "djtasks_fixtures",
    "etcd_fixtures",
    "fault_results",
    "flask_routes_fixtures",
    "mariadb_fixtures",
    "otel_fixtures",
    "postgres_fixtures",
    "redis_fault_fixtures",
    "redlock_fixtures",
    "redis_deploy_fixtures",
    "web_fixtures",
    "zookeeper_fixtures",
]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server on a free loopback port for the whole session, stopped at the end."""
    server = RedisServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A fresh ``file://`` lock directory."""
    return f"file://{tmp_path / 'locks'}"


@pytest.fixture
def kit(url: str) -> Iterator[LockKit]:
    """A kit on :func:`url` that does not renew (tests steer leases themselves)."""
    with LockKit(url, auto_renew=False) as kit:
        yield kit


@pytest.fixture
def backend(url: str) -> Iterator[FileBackend]:
    """The bare ``file://`` backend on :func:`url`."""
    made = create_backend(url)
    assert isinstance(made, FileBackend)
    yield made
    made.close()
