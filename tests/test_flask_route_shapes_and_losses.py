"""@lock_route and lock_blueprint through the Flask test client, on a real file:// store: scopes,
blueprints and method views, either decorator order, and a lock lost or a store down while the
view ran (the response kept, the loss logged, counted and signalled)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from flask import Blueprint, Flask, Response, g
from flask.views import MethodView
from flask_login import LoginManager
from flask_routes_fixtures import held

from lockkit_core import ConfigError
from lockkit_core import LockKit as CoreKit
from lockkit_flask import LockKit, RequestLocked, lock_blueprint, lock_route, state_of


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
