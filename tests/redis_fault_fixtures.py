"""Fixtures of the Redis fault tests (tests/test_redis_faults.py: holders and the server;
tests/test_redis_link_faults.py: the link through a proxy): a namespace per test, and a kit
straight to the session's server with short socket timeouts."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from lockkit_core import LockKit
from lockkit_core.testing import RedisServer

__all__ = ["FAST"]

#: socket and connect timeouts short enough for a fault to show within a test
FAST = "?socket_timeout=1&socket_connect_timeout=1"


@pytest.fixture
def namespace() -> str:
    return f"fault{uuid.uuid4().hex[:10]}"


@pytest.fixture
def direct(redis_server: RedisServer, namespace: str) -> Iterator[LockKit]:
    """A kit on the session's redis-server, not through any proxy."""
    kit = LockKit(redis_server.url + FAST, namespace=namespace, ttl=5)
    yield kit
    kit.close()
