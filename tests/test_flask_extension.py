"""The Flask extension: settings, the factory pattern, several apps, teardown."""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import pytest
from flask import Flask

from lockkit_core import ConfigError
from lockkit_core import LockKit as CoreKit
from lockkit_flask import LockKit, lock_route, state_of


def make_app(tmp_path: Path, **config: object) -> Flask:
    app = Flask("shop")
    app.config.update(TESTING=True, LOCKKIT_URL=f"file://{tmp_path / 'locks'}")
    app.config.update(config)

    @app.put("/orders/<int:order_id>")
    @lock_route("order:{order_id}")
    def pay(order_id: int) -> dict[str, int]:
        return {"order": order_id}

    return app


def test_factory_pattern_keeps_one_kit_per_app_in_extensions(tmp_path: Path) -> None:
    ext = LockKit()
    app = make_app(tmp_path, LOCKKIT_NAMESPACE="shop")
    ext.init_app(app)
    state = app.extensions["lockkit"]
    assert state is state_of(app)
    assert state.kit.namespace == "shop"
    assert state.kit.config.url == f"file://{tmp_path / 'locks'}"
    with app.app_context():
        assert ext.kit is state.kit
    assert app.test_client().put("/orders/1").json == {"order": 1}


def test_constructor_arguments_win_over_app_config_even_when_falsy(tmp_path: Path) -> None:
    app = make_app(tmp_path, LOCKKIT_NAMESPACE="from-config", LOCKKIT_WAIT=5, LOCKKIT_TTL=60)
    LockKit(app, namespace="", wait=0, enabled=True)
    state = state_of(app)
    assert state.kit.namespace == ""
    assert state.wait == 0.0
    assert state.kit.config.ttl == 60.0  # not overridden: the setting stays


def test_settings_given_as_strings_are_parsed(tmp_path: Path) -> None:
    app = make_app(
        tmp_path,
        LOCKKIT_ENABLED="false",
        LOCKKIT_WAIT="2.5",
        LOCKKIT_TTL="10",
        LOCKKIT_RETRY_AFTER="3",
    )
    LockKit(app)
    state = state_of(app)
    assert (state.enabled, state.wait, state.kit.config.ttl, state.retry_after) == (
        False,
        2.5,
        10.0,
        3,
    )


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("LOCKKIT_URLL", "memory://", "unknown setting LOCKKIT_URLL"),
        ("LOCKKIT_ENABLED", "maybe", "LOCKKIT_ENABLED must be true or false"),
        ("LOCKKIT_WAIT", -3, "LOCKKIT_WAIT must be a positive number"),
        ("LOCKKIT_TTL", "soon", "TTL must be a number"),
        ("LOCKKIT_WAIT", "soon", "LOCKKIT_WAIT must be a positive number of seconds, got str"),
        ("LOCKKIT_RETRY_AFTER", "later", "LOCKKIT_RETRY_AFTER must be whole seconds"),
        ("LOCKKIT_URL", "sftp://x", "sftp"),
        ("LOCKKIT_WAIT", "-1", "LOCKKIT_WAIT is '-1', which makes a request wait forever"),
        ("LOCKKIT_WAIT", None, "LOCKKIT_WAIT is None, which makes a request wait forever"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_setting(
    tmp_path: Path, setting: str, value: object, message: str
) -> None:
    app = make_app(tmp_path, **{setting: value})
    with pytest.raises(ConfigError, match=message):
        LockKit(app)


def test_init_app_twice_on_one_app_is_refused(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    LockKit(app)
    with pytest.raises(ConfigError, match="already set up"):
        LockKit().init_app(app)


def test_a_route_on_an_app_without_the_extension_says_how_to_set_it_up(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    with pytest.raises(ConfigError, match=r"not set up on the Flask app 'shop'.*init_app"):
        app.test_client().put("/orders/1")


def test_two_apps_in_one_process_each_lock_on_their_own_kit(tmp_path: Path) -> None:
    ext = LockKit()
    first, second = make_app(tmp_path / "a"), make_app(tmp_path / "b")
    ext.init_app(first)
    ext.init_app(second)
    assert state_of(first).kit is not state_of(second).kit
    # The first app's order 7 is taken elsewhere; the second app, on its own store, is free.
    blocker = CoreKit(f"file://{tmp_path / 'a' / 'locks'}")
    with blocker.lock("order:7"):
        assert first.test_client().put("/orders/7").status_code == 409
        assert second.test_client().put("/orders/7").status_code == 200
    with first.app_context():
        assert ext.kit is state_of(first).kit
    with second.app_context():
        assert ext.kit is state_of(second).kit


def test_disabled_makes_lock_route_a_no_op(tmp_path: Path) -> None:
    app = make_app(tmp_path, LOCKKIT_ENABLED=False)
    LockKit(app)
    with CoreKit(f"file://{tmp_path / 'locks'}").lock("order:7"):
        assert app.test_client().put("/orders/7").status_code == 200


def test_the_kit_is_closed_when_its_app_is_collected(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    LockKit(app)
    kit = state_of(app).kit  # kept alive here: only the app's end may close it
    assert app.test_client().put("/orders/1").status_code == 200
    assert kit._closer.alive
    del app
    gc.collect()
    assert not kit._closer.alive


@pytest.mark.parametrize(
    ("config", "warned"),
    [
        ({}, "default file://"),
        ({"LOCKKIT_URL": None}, "default file://"),  # os.environ.get() of an unset variable
        ({"LOCKKIT_URL": "memory://"}, "memory://"),
    ],
)
def test_a_store_other_processes_may_not_share_is_warned_about(
    config: dict[str, str | None], warned: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = Flask("shop")
    app.config.update(config)
    with caplog.at_level(logging.WARNING, logger="lockkit.flask"):
        LockKit(app)
    assert any(warned in r.getMessage() for r in caplog.records)


def test_the_extension_is_usable_as_the_kit(tmp_path: Path) -> None:
    app = Flask("shop")
    app.config.update(LOCKKIT_URL=f"file://{tmp_path}")
    locks = LockKit(app)
    with app.app_context():
        with locks.lock("report", timeout=0) as held:
            assert isinstance(held.token, int)
            assert locks.admin.info("report") is not None
        assert locks.admin.info("report") is None


def test_an_app_with_locked_routes_is_collected_and_its_kit_closed(tmp_path: Path) -> None:
    import weakref

    def factory() -> Flask:
        app = make_app(tmp_path)
        LockKit(app)

        @lock_route("report")
        @app.put("/report")
        def report() -> str:
            return app.name  # the view refers to its app, as factory views often do

        return app

    app = factory()
    kit = state_of(app).kit
    gone = weakref.ref(app)
    del app
    gc.collect()
    assert gone() is None
    assert not kit._closer.alive
