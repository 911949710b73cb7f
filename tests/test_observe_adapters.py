"""The web adapters' locks on OpenTelemetry: the request guard labels them with the rule's
key template, never the request's key (Flask test client, real file:// store)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from otel_fixtures import Otel

from lockkit_core import LockKit as CoreKit
from lockkit_flask import LockKit, lock_route

NS = "webotel"


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    app = Flask("tickets")
    app.config.update(
        TESTING=True, LOCKKIT_URL=f"file://{tmp_path / 'locks'}", LOCKKIT_NAMESPACE=NS
    )
    LockKit(app)
    return app


@pytest.fixture
def other(app: Flask) -> Iterator[CoreKit]:
    with CoreKit(app.config["LOCKKIT_URL"], namespace=NS) as kit:
        yield kit


def test_a_route_s_lock_is_labelled_with_its_key_template(
    app: Flask, other: CoreKit, otel: Otel
) -> None:
    @app.put("/seats/<int:seat>")
    @lock_route("seat:{seat}", wait=0)
    def book(seat: int) -> str:
        return "ok"

    template = {"lockkit.key_template": "seat:{seat}"}
    before = otel.count("lockkit.lock.hold.duration", NS, template)
    busy_before = otel.count(
        "lockkit.lock.wait.duration", NS, {**template, "lockkit.outcome": "timeout"}
    )
    client = app.test_client()
    assert client.put("/seats/7").status_code == 200
    with other.lock("seat:7"):
        assert client.put("/seats/7").status_code == 409
    assert otel.count("lockkit.lock.hold.duration", NS, template) == before + 1
    busy = {**template, "lockkit.outcome": "timeout"}
    assert otel.count("lockkit.lock.wait.duration", NS, busy) == busy_before + 1
    for point in otel.points("lockkit.lock.wait.duration", NS):
        assert "seat:7" not in repr(dict(point.attributes))
