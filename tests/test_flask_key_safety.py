"""What a request can put into a Flask route's lock key, through the Flask test client on a
real file:// store: credentials are never shown; a key is bounded in size and free of NUL; a
stream does not hold its lock for as long as a slow client reads."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask, Response

from lockkit_core import LockKit as CoreKit
from lockkit_flask import LockKit, lock_route, state_of

TOKEN = "Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2Vu.Zm9yZ2Vk"


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    app = Flask("tickets")
    app.config.update(
        TESTING=True, SECRET_KEY="flask-tests", LOCKKIT_URL=f"file://{tmp_path / 'locks'}"
    )
    LockKit(app)

    @app.post("/me")
    @lock_route("me:{headers[Authorization]}")
    def me() -> dict[str, list[str]]:
        return {"keys": [i.key for i in state_of(app).kit.admin.list("me:")]}

    @app.post("/search")
    @lock_route("search:{query[q]}:{form[f]}")
    def search() -> str:
        return "ok"

    @app.get("/export/<name>")
    @lock_route("export:{name}")
    def export(name: str) -> Response:
        return Response(f"row {i}\n" for i in range(3))

    return app


@pytest.fixture
def other(app: Flask) -> Iterator[CoreKit]:
    with CoreKit(app.config["LOCKKIT_URL"]) as kit:
        yield kit


def test_a_credential_header_is_never_shown_in_keys_answers_or_logs(
    app: Flask, other: CoreKit, caplog: pytest.LogCaptureFixture
) -> None:
    client = app.test_client()
    secret = TOKEN.split()[1]
    with caplog.at_level(logging.DEBUG, "lockkit"):
        first = client.post("/me", headers={"Authorization": TOKEN})
        assert first.status_code == 200 and first.json is not None
        (key,) = first.json["keys"]
        with other.lock(key, timeout=5):  # the same credential again: the same key is busy
            listed = [info.key for info in state_of(app).kit.admin.list()]
            busy = client.post("/me", headers={"Authorization": TOKEN})
    assert busy.status_code == 409
    shown = [key, *listed, busy.text, *(r.getMessage() for r in caplog.records)]
    assert not [s for s in shown if secret in s]
    second = client.post("/me", headers={"Authorization": "Bearer another"})
    assert second.json is not None and second.json["keys"] != [key]


def test_a_huge_request_value_is_a_400_and_leaves_nothing_in_the_store(app: Flask) -> None:
    client = app.test_client()
    huge = "x" * 1_000_000
    for response in (
        client.post(f"/search?q={huge}", data={"f": "a"}),
        client.post("/search?q=a", data={"f": huge}),
    ):
        assert response.status_code == 400
        assert response.headers["Content-Type"] == "application/problem+json"
        assert response.json is not None and "512 bytes" in response.json["detail"]
        assert len(response.data) < 2000
    assert state_of(app).kit.admin.list("search:") == []
    assert client.post("/search?q=a", data={"f": "b"}).status_code == 200


def test_max_key_bytes_follows_the_setting(tmp_path: Path) -> None:
    app = Flask("capped")
    app.config.update(LOCKKIT_URL=f"file://{tmp_path}", LOCKKIT_MAX_KEY_BYTES=20)
    LockKit(app)

    @app.post("/search")
    @lock_route("search:{query[q]}")
    def search() -> str:
        return "ok"

    assert app.test_client().post("/search?q=abc").status_code == 200
    assert app.test_client().post("/search?q=" + "é" * 8).status_code == 400


@pytest.mark.parametrize("where", ["query", "form", "url"])
def test_a_nul_in_a_request_value_is_a_400(app: Flask, where: str) -> None:
    client = app.test_client()
    if where == "query":
        response = client.post("/search?q=a%00b", data={"f": "x"})
    elif where == "form":
        response = client.post("/search?q=a", data={"f": "a\x00b"})
    else:
        response = client.get("/export/a%00b")
    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.json is not None and "NUL" in response.json["detail"]


def test_a_stream_read_slowly_gives_its_lock_up_after_stream_max_hold(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = Flask("slow")
    app.config.update(LOCKKIT_URL=f"file://{tmp_path}", LOCKKIT_STREAM_MAX_HOLD=0.5)
    LockKit(app)

    @app.get("/export/<name>")
    @lock_route("export:{name}")
    def export(name: str) -> Response:
        return Response(f"row {i}\n" for i in range(3))

    with caplog.at_level(logging.WARNING, "lockkit"):
        response = app.test_client().get("/export/a", buffered=False)
        rows = iter(response.response)
        assert next(rows) == b"row 0\n"
        assert state_of(app).kit.admin.info("export:a") is not None
        time.sleep(1.0)  # a slow client: the rest is read long after STREAM_MAX_HOLD
        assert state_of(app).kit.admin.info("export:a") is None
        assert b"".join(rows) == b"row 1\nrow 2\n"
        response.close()
    assert state_of(app).counts["stream_max_hold"] == 1
    assert any("STREAM_MAX_HOLD" in r.getMessage() for r in caplog.records)


def test_a_stream_closed_in_time_keeps_its_lock_until_then(app: Flask) -> None:
    response = app.test_client().get("/export/b", buffered=False)
    assert b"".join(response.response) == b"row 0\nrow 1\nrow 2\n"
    assert state_of(app).kit.admin.info("export:b") is not None
    response.close()
    assert state_of(app).kit.admin.info("export:b") is None


def test_the_limits_may_be_given_to_the_constructor(tmp_path: Path) -> None:
    app = Flask("given")
    app.config.update(LOCKKIT_URL=f"file://{tmp_path}", LOCKKIT_MAX_KEY_BYTES=4096)
    LockKit(app, max_key_bytes=64, stream_max_hold=None)
    assert state_of(app).settings.max_key_bytes == 64  # the constructor first
    assert state_of(app).settings.stream_max_hold is None
