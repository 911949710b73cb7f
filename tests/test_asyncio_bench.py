"""``benchmarks.asyncio_cycle`` as a smoke test: every series runs real acquire+release cycles
on a real server (each raises if a key was not taken). Nothing here depends on timing."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.asyncio_cycle import ASYNCIO, BLOCKING, measure

pytestmark = pytest.mark.redis


def test_the_asyncio_benchmark_times_every_series(redis_server: Any) -> None:
    rows = measure(redis_server.url, cycles=10, rounds=1)
    names = [row.name for row in rows]
    assert len(names) == 4 and BLOCKING in names and ASYNCIO in names
    for row in rows:
        assert 0 < row.p25 <= row.p50 <= row.p75 <= row.p99
