"""settings.LOCKKIT: one kit per settings value, re-read on change; system checks by id."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from django.test import override_settings
from djchecks import run_checks

from lockkit_core import ConfigError
from lockkit_core.testing import RedisServer
from lockkit_core.testing.servers import free_port
from lockkit_django import get_kit
from lockkit_django.conf import lockkit_state


def ids(*, deploy: bool = False) -> list[str]:
    messages = run_checks(include_deployment_checks=deploy)
    return sorted(
        m.id for m in messages if m.id and m.id.startswith("lockkit.") and not m.is_silenced()
    )


def test_override_settings_gives_each_value_its_own_kit(tmp_path: Path) -> None:
    first = get_kit()
    assert first.backend.url.scheme == "memory"
    with override_settings(LOCKKIT={"URL": f"file://{tmp_path}", "NAMESPACE": "a"}):
        inner = get_kit()
        assert inner is not first
        assert inner.backend.url.scheme == "file"
        assert inner.namespace == "a"
        assert get_kit() is inner  # one kit per settings value, not one per call
    assert get_kit().backend.url.scheme == "memory"


def test_a_changed_value_is_read_even_without_the_signal(settings: object) -> None:
    # pytest-django's ``settings`` fixture sends setting_changed; assigning a new dict to
    # the same mapping without it must still be noticed: nobody wins by calling first.
    before = get_kit()
    from django.conf import settings as django_settings

    original = django_settings.LOCKKIT
    try:
        django_settings.LOCKKIT = {**original, "NAMESPACE": "changed"}
        assert get_kit() is not before
        assert get_kit().namespace == "changed"
    finally:
        django_settings.LOCKKIT = original


def test_adapter_settings_are_parsed() -> None:
    with override_settings(LOCKKIT={"URL": "memory://x", "WAIT": 2, "RETRY_AFTER": 2.5}):
        state = lockkit_state()
        assert state.settings.wait == 2.0
        assert state.settings.retry_after == 3
        assert state.settings.config.url == "memory://x"


def test_bad_settings_raise_config_error_at_use() -> None:
    with override_settings(LOCKKIT={"TTL": -1}), pytest.raises(ConfigError, match="TTL"):
        get_kit()


@pytest.mark.parametrize("wait", [-1, None, "-1"])
def test_a_request_wait_of_forever_is_refused_with_a_hint(wait: object) -> None:
    with (
        override_settings(LOCKKIT={"URL": "memory://x", "WAIT": wait}),
        pytest.raises(ConfigError, match=r"WAIT'\] is .*wait forever.*0 to answer 409"),
    ):
        get_kit()


def test_valid_settings_pass_the_checks() -> None:
    with override_settings(LOCKKIT={"URL": "memory://ok"}):
        assert ids() == []  # W001 is silenced by the test project


@pytest.mark.parametrize(
    "url", ["nope://host", "redis:/missing-slash", "redis://h:99999/0", "not a url"]
)
def test_e001_bad_url_or_unknown_scheme(url: str) -> None:
    with override_settings(LOCKKIT={"URL": url}):
        messages = [m for m in run_checks() if m.id == "lockkit.E001"]
    assert len(messages) == 1
    assert messages[0].hint


def test_e002_backend_extra_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # as if redis-py were not installed
    with override_settings(LOCKKIT={"URL": "redis://127.0.0.1:6379/0"}):
        messages = [m for m in run_checks() if m.id == "lockkit.E002"]
    assert len(messages) == 1
    assert "lockkit[redis]" in messages[0].msg + str(messages[0].hint)


@pytest.mark.parametrize(
    "lockkit",
    [
        {"TTL": -1},
        {"TTL": "soon"},
        {"WAIT": "forever"},
        {"RETRY_AFTER": -2},
        {"SURPRISE": 1},
        {"OPTIONS": ["socket_timeout"]},
        {"URL": "redis://127.0.0.1:6379/0", "OPTIONS": {"socket_timeout": "soon"}},
        "redis://127.0.0.1",
        {"MIDDLEWARE": []},
        {"MIDDLEWARE": {"RULES": [{"PATH": "^/x/$"}]}},
        {"MIDDLEWARE": {"RULES": [{"PATH": "(", "KEY": "k"}]}},
        {"MIDDLEWARE": {"RULES": [{"PATH": "^/o/$", "KEY": "order:{order_id}"}]}},
        {"MIDDLEWARE": {"RULES": [{"PATH": "^/o/$", "KEY": "k", "METHODS": "POST"}]}},
        {"MIDDLEWARE": {"RULES": [{"PATH": "^/o/$", "KEY": "k", "METHODS": ["PAY"]}]}},
        {"MIDDLEWARE": {"RULES": [{"PATH": "^/o/$", "KEY": "k", "TTL": 0}]}},
        {"MIDDLEWARE": {"RULES": [{"PATH": "^/o/$", "KEY": "k{0}"}]}},
        {"MIDDLEWARE": {"RULES": [{"PATH": "^/o/$", "KEY": "callable:no.such.func"}]}},
        {"MIDDLEWARE": {"RULES": [{"PATH": "^/o/$", "KEY": "k", "COLOUR": "red"}]}},
    ],
)
def test_e003_malformed_setting_or_rule(lockkit: object) -> None:
    with override_settings(LOCKKIT=lockkit):
        messages = [m for m in run_checks() if m.id and m.id.startswith("lockkit.")]
    assert [m.id for m in messages] == ["lockkit.E003"]
    assert messages[0].hint


def test_w001_memory_backend() -> None:
    with override_settings(LOCKKIT={"URL": "memory://"}, SILENCED_SYSTEM_CHECKS=[]):
        assert ids() == ["lockkit.W001"]


def test_w002_ttl_shorter_than_the_request_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUNICORN_CMD_ARGS", "--workers 2 --timeout 60")
    with override_settings(LOCKKIT={"URL": "memory://", "TTL": 10, "AUTO_RENEW": False}):
        assert ids() == ["lockkit.W002"]
    with override_settings(LOCKKIT={"URL": "memory://", "TTL": 10}):
        assert ids() == []  # renewed leases outlive any request
    with override_settings(LOCKKIT={"URL": "memory://", "TTL": 90, "AUTO_RENEW": False}):
        assert ids() == []


def test_w003_default_temp_directory_without_debug() -> None:
    with override_settings(LOCKKIT={}, DEBUG=False):
        assert ids() == ["lockkit.W003"]
    # os.environ.get() of an unset variable: no URL given either
    with override_settings(LOCKKIT={"URL": None}, DEBUG=False):
        assert ids() == ["lockkit.W003"]
    with override_settings(LOCKKIT={}, DEBUG=True):
        assert ids() == []
    with override_settings(LOCKKIT={"URL": "file:///var/tmp/shop-locks"}, DEBUG=False):
        assert ids() == []


@pytest.mark.redis
def test_e004_deploy_store_unreachable(redis_server: RedisServer) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    options = {"socket_timeout": 1.0}
    with override_settings(LOCKKIT={"URL": dead, "OPTIONS": options}):
        assert ids() == []  # unreachable is only checked with --deploy
        assert ids(deploy=True) == ["lockkit.E004"]
    with override_settings(LOCKKIT={"URL": redis_server.url, "OPTIONS": options}):
        # reachable; the doctor only warns (W007: the test server persists nothing)
        assert set(ids(deploy=True)) <= {"lockkit.W007"}
