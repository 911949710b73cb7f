"""@lock_route and lock_blueprint through the Flask test client, on a real file:// store.

"Someone else" is another kit on the same directory, i.e. another owner on the same store.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from flask import Blueprint, Flask, Response, abort, g, request
from flask.views import MethodView
from flask_login import LoginManager, UserMixin

from lockkit_core import ConfigError
from lockkit_core import LockKit as CoreKit
from lockkit_core.testing import free_port
from lockkit_flask import LockKit, RequestLocked, lock_blueprint, lock_route, state_of


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    app = Flask("tickets")
    app.config.update(TESTING=True, LOCKKIT_URL=f"file://{tmp_path / 'locks'}")
    LockKit(app)
    return app


@pytest.fixture
def other(app: Flask) -> Iterator[CoreKit]:
    """Another owner on the app's store."""
    with CoreKit(app.config["LOCKKIT_URL"]) as kit:
        yield kit


def held(app: Flask, key: str) -> bool:
    return state_of(app).kit.admin.info(key) is not None


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


def test_scope_global_shares_a_key_across_routes(app: Flask, other: CoreKit) -> None:
    @app.put("/a")
    @lock_route("stock", scope="global")
    def a() -> str:
        return "a"

    @app.put("/b")
    @lock_route("stock", scope="route")
    def b() -> str:
        return "b"

    with other.lock("stock"):
        assert app.test_client().put("/a").status_code == 409
        assert app.test_client().put("/b").status_code == 200
    with pytest.raises(ConfigError, match="scope must be"):
        lock_route("x", scope="app")  # type: ignore[arg-type]


def test_blueprint_routes_and_method_views(app: Flask, other: CoreKit) -> None:
    bp = Blueprint("shop", __name__, url_prefix="/shop")

    @bp.put("/carts/<int:cart>")
    @lock_route("cart:{cart}")
    def cart(cart: int) -> str:
        return "cart"

    class Item(MethodView):
        decorators: ClassVar[list[Callable[..., Any]]] = [
            lock_route("item:{item}", methods=["PUT"])
        ]

        def get(self, item: int) -> str:
            return "get"

        def put(self, item: int) -> str:
            return "put"

    class Order(MethodView):
        @lock_route("order:{order}")
        def post(self, order: int) -> str:
            return "post"

    bp.add_url_rule("/items/<int:item>", view_func=Item.as_view("item"))
    bp.add_url_rule("/orders/<int:order>", view_func=Order.as_view("order"))
    app.register_blueprint(bp)
    client = app.test_client()
    with other.lock("cart:1"), other.lock("item:1"):
        with other.lock("order:1"):
            assert client.put("/shop/carts/1").status_code == 409
            assert client.put("/shop/items/1").status_code == 409
            assert client.get("/shop/items/1").status_code == 200
            assert client.post("/shop/orders/1").status_code == 409
        assert client.put("/shop/carts/2").status_code == 200
        assert client.post("/shop/orders/1").status_code == 200


def test_lock_blueprint_locks_every_view_of_the_blueprint(app: Flask, other: CoreKit) -> None:
    bp = Blueprint("admin", __name__)
    lock_blueprint(bp, "tenant:{headers[X-Tenant]}", scope="global")
    seen = []

    @bp.get("/report")
    def report() -> str:
        seen.append(held(app, "tenant:acme"))
        return "report"

    @bp.get("/export")
    def export() -> Response:
        return Response(f"{i}\n" for i in range(3))

    @bp.get("/crash")
    def crash() -> str:
        raise RuntimeError("boom")

    app.register_blueprint(bp)
    client = app.test_client()
    acme = {"X-Tenant": "acme"}
    assert client.get("/report", headers=acme).status_code == 200
    assert seen == [True]
    assert not held(app, "tenant:acme")
    assert client.get("/report").status_code == 400
    with other.lock("tenant:acme"):
        assert client.get("/report", headers=acme).status_code == 409
    stream = client.get("/export", headers=acme, buffered=False)
    assert held(app, "tenant:acme")
    stream.close()
    assert not held(app, "tenant:acme")
    with pytest.raises(RuntimeError):
        client.get("/crash", headers=acme)
    assert not held(app, "tenant:acme")


def test_a_lease_that_expired_while_the_view_ran_keeps_the_response_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = Flask("slow")
    app.config.update(
        TESTING=True, LOCKKIT_URL=f"file://{tmp_path / 'locks'}", LOCKKIT_AUTO_RENEW=False
    )
    LockKit(app)

    @app.put("/slow")
    @lock_route("job", ttl=0.1)
    def slow() -> str:
        time.sleep(0.3)  # outlives the lease: another request could have run meanwhile
        return "done"

    with caplog.at_level(logging.ERROR, logger="lockkit.flask"):
        response = app.test_client().put("/slow")
    assert (response.status_code, response.text) == (200, "done")
    assert any("'job' was lost while its request ran" in r.getMessage() for r in caplog.records)
    assert state_of(app).counts["lost"] == 1


def test_get_in_methods_also_locks_head(app: Flask, other: CoreKit) -> None:
    @app.get("/report")
    @lock_route("report", methods=["GET"])
    def report() -> str:
        return "report"

    with other.lock("report"):
        assert app.test_client().head("/report").status_code == 409


def test_an_anonymous_user_on_a_per_user_route_is_a_400(app: Flask) -> None:
    LoginManager(app).user_loader(lambda user_id: None)

    @app.post("/cart")
    @lock_route("cart:{user.id}")
    def cart() -> str:
        return "ok"

    response = app.test_client().post("/cart")
    assert response.status_code == 400
    assert response.json is not None
    assert "built from the signed-in user" in response.json["detail"]


def test_former_names_still_work_with_a_deprecation_warning(app: Flask, other: CoreKit) -> None:
    import lockkit_flask

    with pytest.deprecated_call():
        assert lockkit_flask.RouteLocked is RequestLocked
    with pytest.deprecated_call():
        rule = lock_route("seat:{args[row]}", on_busy=lambda exc: ("later", 202))

    @app.put("/seats")
    @rule
    def seats() -> str:
        return "ok"

    with other.lock("seat:B"):
        assert app.test_client().put("/seats?row=B").status_code == 202


def test_a_lock_lost_while_the_view_ran_keeps_the_response_logs_counts_and_signals(
    app: Flask, other: CoreKit, caplog: pytest.LogCaptureFixture
) -> None:
    from lockkit_flask import lock_lost

    told: list[tuple[str, str]] = []

    def on_lost(sender: Flask, lock: Any, route: str, error: BaseException) -> None:
        told.append((lock.key, route))

    @app.post("/pay")
    @lock_route("order:1")
    def pay() -> str:
        other.admin.force_release("order:1")  # an operator frees the key meanwhile
        return "paid"

    with lock_lost.connected_to(on_lost, app), caplog.at_level(logging.ERROR, "lockkit.flask"):
        response = app.test_client().post("/pay")
    assert (response.status_code, response.text) == (200, "paid")
    assert any("'order:1' was lost" in r.getMessage() for r in caplog.records)
    assert state_of(app).counts["lost"] == 1
    assert told == [("order:1", "pay")]


def test_the_view_finds_its_held_lock_in_g_for_fencing(app: Flask) -> None:
    seen: list[Any] = []

    @app.post("/pay/<int:order>")
    @lock_route("order:{order}")
    def pay(order: int) -> str:
        g.lockkit_lock.check()
        seen.append((g.lockkit_lock.key, g.lockkit_lock.token))
        return "ok"

    assert app.test_client().post("/pay/7").status_code == 200
    assert seen[0][0] == "order:7"
    assert isinstance(seen[0][1], int)


def test_lock_route_written_above_app_route_locks_the_route(app: Flask, other: CoreKit) -> None:
    tokens: list[int] = []

    @lock_route("seat:{seat}")
    @app.put("/seats/<int:seat>")
    def book(seat: int) -> str:
        tokens.append(g.lockkit_lock.token)
        return "ok"

    @lock_route("crash")
    @app.put("/crash")
    def crash() -> str:
        raise RuntimeError("boom")

    client = app.test_client()
    with other.lock("seat:3"):
        assert client.put("/seats/3").status_code == 409
    assert client.put("/seats/3").status_code == 200
    assert not held(app, "seat:3")
    assert len(tokens) == 1
    with pytest.raises(RuntimeError):
        client.put("/crash")
    assert not held(app, "crash")


def test_ttl_none_holds_the_route_lock_without_a_lease(app: Flask) -> None:
    seen: list[object] = []

    @app.post("/export")
    @lock_route("export", ttl=None)
    def export() -> str:
        info = state_of(app).kit.admin.info("export")
        seen.append(None if info is None else info.ttl_remaining)
        return "ok"

    assert app.test_client().post("/export").status_code == 200
    assert seen == [None]  # held, with no lease to run out (a ttl would show time left)
    assert not held(app, "export")


def test_either_order_locks_routes_registered_before_the_extension_and_on_blueprints(
    tmp_path: Path,
) -> None:
    app = Flask("late")
    app.config.update(TESTING=True, LOCKKIT_URL=f"file://{tmp_path / 'locks'}")

    @lock_route("early")
    @app.put("/early")
    def early() -> str:
        return "early"

    bp = Blueprint("shop", __name__)

    @lock_route("cart:{cart}")
    @bp.put("/carts/<int:cart>")
    def cart(cart: int) -> str:
        return "cart"

    LockKit(app)  # after the route above was registered
    app.register_blueprint(bp)
    client = app.test_client()
    with CoreKit(app.config["LOCKKIT_URL"]) as other, other.lock("early"), other.lock("cart:1"):
        assert client.put("/early").status_code == 409
        assert client.put("/carts/1").status_code == 409
        assert client.put("/carts/2").status_code == 200


@pytest.mark.redis
def test_a_store_down_at_release_keeps_the_response_logs_counts_and_signals(
    redis_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from lockkit_core.testing.proxy import TcpProxy
    from lockkit_flask import lock_lost

    told: list[str] = []

    def on_lost(sender: Flask, lock: Any, route: str, error: BaseException) -> None:
        told.append(type(error).__name__)

    with TcpProxy("127.0.0.1", redis_server.port) as proxy:
        app = Flask("outage")
        app.config.update(TESTING=True, LOCKKIT_URL=proxy.url_for(socket_timeout=0.5))
        LockKit(app)

        @app.post("/pay")
        @lock_route("order:1")
        def pay() -> str:
            proxy.partition()  # the store goes away while the payment runs
            return "paid"

        with lock_lost.connected_to(on_lost, app), caplog.at_level(logging.ERROR, "lockkit.flask"):
            response = app.test_client().post("/pay")
        proxy.heal()
    assert (response.status_code, response.text) == (200, "paid")
    assert any("'order:1' not released" in r.getMessage() for r in caplog.records)
    assert state_of(app).counts["unreleased"] == 1
    assert told == ["BackendUnavailable"]
