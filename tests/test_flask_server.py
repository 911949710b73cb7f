"""Exclusion under a real multi-process server: flask_tickets under gunicorn (2 workers x 4
gthread threads), hit by 16 concurrent HTTP clients.

``PUT /todos?index=N`` writes a file, works 5 ms, and reads it back. Unlocked, another
request overwrites the file in between; under ``@lock_route`` that never happens.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockkit_core.testing import RedisServer

SAMPLE = Path(__file__).resolve().parent.parent / "sample_projects" / "flask_tickets"
sys.path.insert(0, str(SAMPLE))

from serve import Gunicorn, concurrently  # noqa: E402

REQUESTS = 200


@pytest.fixture(
    params=[
        "file",
        pytest.param("redis", marks=pytest.mark.redis),
        # The kit is made in the arbiter before the fork: each worker must use its own.
        pytest.param("redis-preload", marks=pytest.mark.redis),
    ]
)
def server(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer
) -> Iterator[Gunicorn]:
    url = f"file://{tmp_path}/locks" if request.param == "file" else redis_server.url
    env = {"TICKETS_DATA_DIR": str(tmp_path), "TICKETS_LOCKKIT_URL": url}
    preload = request.param.endswith("preload")
    with Gunicorn(env, workers=2, threads=4, preload=preload) as gunicorn:
        yield gunicorn


def put_todos(server: Gunicorn, prefix: str) -> tuple[list[dict[str, object]], set[int]]:
    calls = [("PUT", f"{prefix}/todos?index={i % 2}", f"value-{i}") for i in range(REQUESTS)]
    replies = concurrently(server.port, calls, clients=16)
    assert [status for status, _ in replies] == [200] * REQUESTS
    answers = [json.loads(body) for _, body in replies]
    return [a for a in answers if a["written"] != a["read"]], {a["pid"] for a in answers}


def test_lock_route_excludes_concurrent_writers_across_worker_processes(
    server: Gunicorn,
) -> None:
    # The unlocked twin shows that this load does race: without the lock, values mix.
    unlocked_mismatches, _ = put_todos(server, "/unlocked")
    assert unlocked_mismatches, "the load never raced: the test could not see a missing lock"
    mismatches, pids = put_todos(server, "")
    assert len(pids) == 2, "both worker processes must have served requests"
    assert mismatches == []


def test_last_seats_are_sold_exactly_once(server: Gunicorn) -> None:
    concurrently(server.port, [("PUT", "/events/gala?seats=5", "")])
    calls = [("POST", "/events/gala/book", f"buyer=b{i}") for i in range(30)]
    statuses = sorted(status for status, _ in concurrently(server.port, calls, clients=16))
    assert statuses == [201] * 5 + [410] * 25
    state = json.loads(concurrently(server.port, [("GET", "/events/gala", "")])[0][1])
    assert state["left"] == 0
    assert sorted(state["sold"]) == sorted(set(state["sold"]))
    assert len(state["sold"]) == 5


def test_lock_route_above_app_route_locks_too(server: Gunicorn) -> None:
    calls = [("POST", "/events/gala/refund", "") for _ in range(3)]
    statuses = sorted(status for status, _ in concurrently(server.port, calls, clients=3))
    assert statuses == [200, 409, 409]
