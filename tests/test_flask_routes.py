"""@lock_route and lock_blueprint through the Flask test client, on a real file:// store.

"Someone else" is another kit on the same directory, i.e. another owner on the same store.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, Response, abort, g, request
from flask_login import LoginManager, UserMixin
from flask_routes_fixtures import held

from lockkit_core import ConfigError
from lockkit_core import LockKit as CoreKit
from lockkit_core.testing import free_port
from lockkit_flask import LockKit, RequestLocked, lock_route, state_of


def test_a_busy_route_answers_409_problem_json_with_retry_after(app: Flask, other: CoreKit) -> None:
    @app.put("/seats/<int:seat>")
    @lock_route("seat:{seat}")
    def book(seat: int) -> dict[str, bool]:
        return {"booked": True}

    client = app.test_client()
    with other.lock("seat:3"):
        busy = client.put("/seats/3")
        assert client.put("/seats/4").status_code == 200
    assert busy.status_code == 409
    assert busy.headers["Content-Type"] == "application/problem+json"
    assert busy.headers["Retry-After"] == "1"
    assert busy.json is not None
    assert busy.json["status"] == 409
    assert busy.json["lock"] == "seat:3"
    assert "another request holds the lock" in busy.json["detail"]
    assert client.put("/seats/3").status_code == 200
    assert state_of(app).counts["busy"] == 1


def test_the_lock_is_held_while_the_view_runs_and_freed_after(app: Flask) -> None:
    seen = []

    @app.put("/seats/<int:seat>")
    @lock_route("seat:{seat}")
    def book(seat: int) -> str:
        seen.append(held(app, "seat:5"))
        return "ok"

    assert app.test_client().put("/seats/5").status_code == 200
    assert seen == [True]
    assert not held(app, "seat:5")


def test_a_route_waits_up_to_wait_for_the_lock(app: Flask, other: CoreKit) -> None:
    @app.put("/seats/<int:seat>")
    @lock_route("seat:{seat}", wait=10)
    def book(seat: int) -> str:
        return "ok"

    lock = other.lock("seat:1", reentrant=False)
    lock.acquire()
    releaser = threading.Timer(0.3, lock.release)
    started = time.monotonic()
    releaser.start()
    assert app.test_client().put("/seats/1").status_code == 200
    assert time.monotonic() - started >= 0.3
    releaser.join()


def test_errorhandler_and_on_busy_override_the_409(app: Flask, other: CoreKit) -> None:
    @app.errorhandler(RequestLocked)
    def sold_out(exc: RequestLocked) -> tuple[str, int]:
        return f"try later ({exc.key})", 423

    @app.put("/a")
    @lock_route("x", scope="route")
    def a() -> str:
        return "a"

    @app.put("/b")
    @lock_route("x", scope="route", on_busy=lambda request, exc: ({"queued": exc.route}, 202))
    def b() -> str:
        return "b"

    with other.lock("a:x"), other.lock("b:x"):
        first = app.test_client().put("/a")
        second = app.test_client().put("/b")
    assert (first.status_code, first.text) == (423, "try later (a:x)")
    assert (second.status_code, second.json) == (202, {"queued": "b"})


def test_keys_are_built_from_every_source(app: Flask) -> None:
    class User(UserMixin):
        id = "u17"

    login = LoginManager(app)
    login.request_loader(lambda req: User() if req.headers.get("X-User") else None)

    @app.before_request
    def tenant() -> None:
        g.tenant = "acme"

    seen: list[str] = []

    def remember() -> None:
        seen.extend(info.key for info in state_of(app).kit.admin.list())

    @app.post("/events/<event>/book")
    @lock_route(
        "{event}:{query[row]}:{form[seat]}:{headers[X-Desk]}:{g.tenant}:{user}:{user.id}",
    )
    def book(event: str) -> str:
        remember()
        return "ok"

    @app.post("/json")
    @lock_route("order:{json[order][id]}")
    def by_json() -> str:
        remember()
        return "ok"

    @app.post("/callable")
    @lock_route(lambda: f"ip:{request.remote_addr}")
    def by_callable() -> str:
        remember()
        return "ok"

    client = app.test_client()
    response = client.post(
        "/events/gala/book?row=B",
        data={"seat": "12"},
        headers={"X-Desk": "north", "X-User": "1"},
    )
    assert response.status_code == 200, response.text
    assert client.post("/json", json={"order": {"id": 42}}).status_code == 200
    assert client.post("/callable").status_code == 200
    assert seen == ["gala:B:12:north:acme:u17:u17", "order:42", "ip:127.0.0.1"]


@pytest.mark.parametrize(
    ("template", "send", "named"),
    [
        ("{query[row]}", {}, "the query parameter 'row'"),
        ("{form[seat]}", {"data": {"other": "1"}}, "the form field 'seat'"),
        ("{json[order][id]}", {"json": {"order": {}}}, "the JSON body member 'order][id'"),
        ("{json[order]}", {"data": "not json"}, "the JSON body member 'order'"),
        ("{headers[X-Desk]}", {}, "the header 'X-Desk'"),
    ],
)
def test_a_value_the_request_lacks_is_a_400_naming_route_and_value(
    app: Flask, template: str, send: dict[str, Any], named: str
) -> None:
    @app.post("/book")
    @lock_route(template)
    def book() -> str:
        return "ok"

    response = app.test_client().post("/book", **send)
    assert response.status_code == 400
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.json is not None
    assert response.json["detail"].startswith(f"book locks on a key built from {named}")


def test_a_value_the_app_should_provide_is_a_config_error_naming_route_and_value(
    app: Flask,
) -> None:
    @app.post("/book")
    @lock_route("{g.tenant}")
    def book() -> str:
        return "ok"

    with pytest.raises(ConfigError, match=r"book locks on '\{g.tenant\}'.*before_request") as exc:
        app.test_client().post("/book")
    assert not isinstance(exc.value, KeyError)


def test_a_template_naming_no_view_argument_fails_at_registration() -> None:
    with pytest.raises(ConfigError, match=r"names seat_id, which is neither a view argument"):

        @lock_route("seat:{seat_id}")
        def book(seat: int) -> str:
            return "ok"

    with pytest.raises(ConfigError, match="positional field"):
        lock_route("seat:{0}")


def test_methods_limits_which_requests_lock(app: Flask, other: CoreKit) -> None:
    @app.route("/seats/<int:seat>", methods=["GET", "PUT"])
    @lock_route("seat:{seat}", methods=["put"])
    def seat(seat: int) -> str:
        return request.method

    with other.lock("seat:1"):
        assert app.test_client().get("/seats/1").status_code == 200
        assert app.test_client().put("/seats/1").status_code == 409
    with pytest.raises(ConfigError, match="not HTTP methods"):
        lock_route("x", methods=["FETCH"])
    with pytest.raises(ConfigError, match="not a string"):
        lock_route("x", methods="PUT")


def test_a_view_that_raises_releases_its_lock(app: Flask) -> None:
    @app.put("/crash/<int:n>")
    @lock_route("n:{n}")
    def crash(n: int) -> str:
        if n == 1:
            raise RuntimeError("boom")
        abort(404)

    client = app.test_client()
    with pytest.raises(RuntimeError, match="boom"):
        client.put("/crash/1")
    assert not held(app, "n:1")
    assert client.put("/crash/2").status_code == 404
    assert not held(app, "n:2")


def test_a_streamed_response_keeps_the_lock_until_the_stream_closes(app: Flask) -> None:
    @app.get("/export/<int:n>")
    @lock_route("export:{n}")
    def export(n: int) -> Response:
        return Response(f"row {i}\n" for i in range(3))

    response = app.test_client().get("/export/1", buffered=False)
    first = next(iter(response.response))
    assert first == b"row 0\n"
    assert held(app, "export:1")
    response.close()
    assert not held(app, "export:1")


def test_an_async_view_runs_under_the_lock(app: Flask, other: CoreKit) -> None:
    @app.put("/async/<int:n>")
    @lock_route("n:{n}")
    async def book(n: int) -> dict[str, bool]:
        await asyncio.sleep(0)
        return {"held": held(app, "n:1")}

    client = app.test_client()
    assert client.put("/async/1").json == {"held": True}
    assert not held(app, "n:1")
    with other.lock("n:1"):
        assert client.put("/async/1").status_code == 409


def test_an_async_view_waiting_for_its_lock_never_blocks_the_event_loop(
    app: Flask, other: CoreKit
) -> None:
    async def view(n: int) -> str:
        return "ok"

    locked = lock_route("n:{n}", wait=10)(view)
    app.put("/async/<int:n>")(locked)
    blocker = other.lock("n:1", reentrant=False)
    blocker.acquire()
    threading.Timer(0.5, blocker.release).start()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    async def main() -> Any:
        tick = asyncio.create_task(ticker())
        try:
            return await locked(n=1)
        finally:
            tick.cancel()

    # The coroutine runs on a loop of our own, beside a ticker, in a routed request context.
    with app.test_request_context("/async/1", method="PUT"):
        response = asyncio.run(main())
    assert response.status_code == 200
    assert ticks >= 10  # the loop ran all through the 0.5 s wait


def test_a_store_that_is_down_gives_503_or_runs_unlocked_when_failing_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = Flask("down")
    app.config.update(TESTING=True, LOCKKIT_URL=f"redis://127.0.0.1:{free_port()}/0")
    LockKit(app)

    @app.put("/closed")
    @lock_route("x")
    def closed() -> str:
        return "ran"

    @app.put("/open")
    @lock_route("x", fail_open=True)
    def opened() -> str:
        return "ran"

    with caplog.at_level(logging.INFO, logger="lockkit.flask"):
        refused = app.test_client().put("/closed")
        ran = app.test_client().put("/open")
    assert refused.status_code == 503
    assert refused.headers["Content-Type"] == "application/problem+json"
    assert refused.headers["Retry-After"] == "1"
    assert (ran.status_code, ran.text) == (200, "ran")
    logged = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert any(level == "ERROR" and "closed refused (503)" in m for level, m in logged)
    assert any(level == "WARNING" and "opened runs WITHOUT its lock" in m for level, m in logged)
    assert dict(state_of(app).counts) == {"unavailable": 1, "fail_open": 1}
