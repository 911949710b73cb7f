"""A store that answers with an error a failover causes (a demoted, read-only redis): the
finished request keeps its response, and the next one is a 503 problem, not a 500 page."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis
from flask import Flask

from lockkit_core.guard import PROBLEM_JSON
from lockkit_core.testing import RedisServer, free_port
from lockkit_flask import LockKit, lock_lost, lock_route, state_of

pytestmark = pytest.mark.redis


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A server of this test's own: it is demoted to a replica."""
    with RedisServer() as server:
        yield server


def test_a_store_demoted_while_the_view_ran_keeps_the_response_then_answers_503(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    admin = redis.Redis(port=server.port)
    app = Flask("failover")
    app.config.update(TESTING=True, LOCKKIT_URL=server.url)
    LockKit(app)
    charged: list[str] = []
    told: list[str] = []

    @app.post("/pay")
    @lock_route("pay")
    def pay() -> str:
        charged.append("pay")
        admin.replicaof("127.0.0.1", free_port())  # a failover demotes the store
        return "charged"

    @app.post("/refund")
    @lock_route("refund")
    def refund() -> str:
        charged.append("refund")
        return "refunded"

    def on_lost(sender: Flask, error: BaseException, **_: object) -> None:
        told.append(type(error).__name__)

    client = app.test_client()
    try:
        with lock_lost.connected_to(on_lost, app), caplog.at_level(logging.INFO, "lockkit.flask"):
            paid = client.post("/pay")
            refunded = client.post("/refund")
    finally:
        admin.replicaof("no", "one")
    assert (paid.status_code, paid.text) == (200, "charged")
    assert state_of(app).counts["unreleased"] == 1
    assert told == ["BackendUnavailable"]
    assert (refunded.status_code, refunded.content_type) == (503, PROBLEM_JSON)
    assert charged == ["pay"]
    assert state_of(app).counts["unavailable"] == 1
    assert any("'pay' not released" in r.getMessage() for r in caplog.records)
