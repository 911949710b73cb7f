"""``@lock_route`` written above ``@app.route`` / ``@bp.route``: stacked routes, stacked
locks, and apps made by a factory many times over."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest
from flask import Blueprint, Flask

from lockkit_core import LockKit as CoreKit
from lockkit_flask import LockKit, lock_route, state_of


def _app(tmp_path: Path, name: str = "shop") -> Flask:
    app = Flask(name)
    app.config.update(TESTING=True, LOCKKIT_URL=f"file://{tmp_path / 'locks'}")
    return app


def _held(app: Flask, key: str) -> bool:
    return state_of(app).kit.admin.info(key) is not None


@pytest.mark.parametrize("extension_first", [True, False], ids=["extension-first", "late"])
def test_lock_route_above_two_stacked_blueprint_routes_locks_both(
    tmp_path: Path, extension_first: bool
) -> None:
    app = _app(tmp_path)
    if extension_first:
        LockKit(app)
    bp = Blueprint("bp", __name__)

    @lock_route("cart")
    @bp.post("/a")
    @bp.post("/b")
    def cart() -> dict[str, bool]:
        return {"held": _held(app, "cart")}

    app.register_blueprint(bp)
    if not extension_first:
        LockKit(app)
    client = app.test_client()
    assert client.post("/a").json == {"held": True}
    assert client.post("/b").json == {"held": True}
    with CoreKit(app.config["LOCKKIT_URL"]) as other, other.lock("cart"):
        assert client.post("/a").status_code == 409
        assert client.post("/b").status_code == 409


def test_two_lock_routes_above_app_route_take_both_locks(tmp_path: Path) -> None:
    app = _app(tmp_path)
    LockKit(app)

    @lock_route("outer")
    @lock_route("inner")
    @app.post("/x")
    def x() -> dict[str, bool]:
        return {"outer": _held(app, "outer"), "inner": _held(app, "inner")}

    assert app.test_client().post("/x").json == {"outer": True, "inner": True}
    with CoreKit(app.config["LOCKKIT_URL"]) as other, other.lock("outer"):
        assert app.test_client().post("/x").status_code == 409


def test_apps_made_again_and_again_leave_nothing_behind(tmp_path: Path) -> None:
    # A test suite builds an app per test from one factory: the module-level blueprint's
    # views must not pile up a record per app that outlives the app.
    bp = Blueprint("many", __name__)
    for n in range(10):

        @bp.post(f"/v{n}", endpoint=f"v{n}")
        @lock_route(f"v{n}")
        def view() -> str:
            return "ok"

    def build() -> None:
        app = _app(tmp_path, "factory")
        LockKit(app)
        app.register_blueprint(bp)

    build()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(150):
            build()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    only_route = [tracemalloc.Filter(True, "*lockkit_flask/route.py")]
    grown = sum(
        s.size_diff for s in after.filter_traces(only_route).compare_to(
            before.filter_traces(only_route), "filename"
        )
    )  # fmt: skip
    assert grown < 8_000, f"lockkit_flask/route.py kept {grown} bytes for 150 dropped apps"
