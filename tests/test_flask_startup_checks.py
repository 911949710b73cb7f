"""What ``@lock_route`` and ``lock_blueprint`` get wrong is an error when the app is set up,
not a 500 at the first request."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Blueprint, Flask

from lockkit_core import ConfigError
from lockkit_flask import LockKit, lock_blueprint, lock_route

# Building a kit makes no connection: no server is needed to check a rule against it.
REDIS = "redis://127.0.0.1:6379/0"


def _app(url: str, name: str = "shop") -> Flask:
    app = Flask(name)
    app.config.update(TESTING=True, LOCKKIT_URL=url)
    return app


def test_ttl_none_on_a_store_that_needs_a_lease_fails_at_registration() -> None:
    app = _app(REDIS)
    LockKit(app)
    with pytest.raises(ConfigError, match=r"export.*ttl=None.*redis"):

        @app.post("/export")
        @lock_route("export", ttl=None)
        def export() -> str:
            return "ok"


def test_ttl_none_above_app_route_fails_when_it_decorates() -> None:
    app = _app(REDIS)
    LockKit(app)
    with pytest.raises(ConfigError, match=r"export.*ttl=None"):

        @lock_route("export", ttl=None)
        @app.post("/export")
        def export() -> str:
            return "ok"


def test_ttl_none_is_checked_for_routes_registered_before_the_extension() -> None:
    app = _app(REDIS)

    @app.post("/export")
    @lock_route("export", ttl=None)
    def export() -> str:
        return "ok"

    bp = Blueprint("reports", __name__)
    lock_blueprint(bp, "reports", ttl=None)
    with pytest.raises(ConfigError, match=r"ttl=None"):
        LockKit(app)
    other = _app(REDIS, "other")
    other.register_blueprint(bp)
    with pytest.raises(ConfigError, match=r"reports.*ttl=None"):
        LockKit(other)


def test_ttl_none_on_a_blueprint_fails_when_it_is_registered() -> None:
    app = _app(REDIS)
    LockKit(app)
    bp = Blueprint("reports", __name__)
    lock_blueprint(bp, "reports", ttl=None)
    with pytest.raises(ConfigError, match=r"reports.*ttl=None"):
        app.register_blueprint(bp)


def test_ttl_none_on_a_store_without_leases_is_accepted(tmp_path: Path) -> None:
    app = _app(f"file://{tmp_path / 'locks'}")
    LockKit(app)

    @app.post("/export")
    @lock_route("export", ttl=None)
    def export() -> str:
        return "ok"

    assert app.test_client().post("/export").status_code == 200


def test_a_key_typo_in_method_view_decorators_fails_at_registration(tmp_path: Path) -> None:
    from flask.views import MethodView

    app = _app(f"file://{tmp_path / 'locks'}")
    LockKit(app)

    class Item(MethodView):
        decorators = [lock_route("item:{itme}")]  # noqa: RUF012

        def put(self, item: str) -> str:
            return "ok"

    with pytest.raises(ConfigError, match=r"item.*itme"):
        app.add_url_rule("/items/<item>", view_func=Item.as_view("item"))

    class Fine(MethodView):
        decorators = [lock_route("item:{item}")]  # noqa: RUF012

        def put(self, item: str) -> str:
            return "ok"

    app.add_url_rule("/fine/<item>", view_func=Fine.as_view("fine"))
    assert app.test_client().put("/fine/1").text == "ok"


def test_a_blueprint_key_naming_what_a_route_lacks_fails_at_registration(
    tmp_path: Path,
) -> None:
    app = _app(f"file://{tmp_path / 'locks'}")
    LockKit(app)
    bp = Blueprint("carts", __name__)
    lock_blueprint(bp, "cart:{cart_id}")

    @bp.put("/carts/<int:cart_id>")
    def cart(cart_id: int) -> str:
        return "ok"

    @bp.get("/carts")
    def carts() -> str:
        return "all"

    with pytest.raises(ConfigError, match=r"carts\.carts.*cart_id"):
        app.register_blueprint(bp)
