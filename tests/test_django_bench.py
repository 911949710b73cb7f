"""The in-process part of ``scripts/bench-django --quick``, as a smoke test: it runs, every
request answers 200, and the counts it reports hold. Nothing here depends on timing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.signals import request_finished, request_started
from django.db import close_old_connections

from benchmarks.django_inprocess import cases, measure
from lockkit_core.backends.file.fence import FenceCounter
from lockkit_core.testing import RedisServer


@pytest.fixture
def no_database_checks() -> Iterator[None]:
    """Keep the handler away from the test database, as Django's test client does: the
    benchmark's project has none, the test project has one that other tests leave open."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    try:
        yield
    finally:
        for signal in (request_started, request_finished):
            signal.connect(close_old_connections)


@pytest.mark.redis
@pytest.mark.usefixtures("no_database_checks")
def test_the_in_process_benchmark_counts_each_path_s_redis_commands(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    no_rule, on_redis, on_file = cases(f"file://{tmp_path / 'locks'}", redis_server.url)
    assert (no_rule.route, on_redis.route, on_file.route) == ("plain", "locked", "locked")

    unmatched = measure(no_rule, requests=40, rounds=2)
    assert unmatched.requests == 80
    assert unmatched.commands_per_request == 0.0  # the store is never asked

    locked = measure(on_redis, requests=40, rounds=2)
    assert locked.requests == 80
    assert locked.commands == {"evalsha": 2.0}  # one acquire, one release, per request
    assert locked.commands_per_request == 2.0

    started_us = time.time_ns() // 1000
    filed = measure(on_file, requests=40, rounds=2)
    assert filed.requests == 80
    assert filed.commands_per_request is None
    # The file:// rule locked: its records are still there (kept a while for reuse), or
    # were removed, which raised the counter to their fences (at or above the grant's clock).
    locks = tmp_path / "locks"
    assert any(locks.glob("*.lock")) or FenceCounter(str(locks)).floor() >= started_us
