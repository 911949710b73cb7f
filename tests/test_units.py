"""I/O-free pieces: lease arithmetic, key templates, settings and URL parsing."""

from __future__ import annotations

import dataclasses

import pytest

from lockkit_core import ConfigError, KeyTemplate, LockKitConfig, parse_url
from lockkit_core.config import UNSET, default_url
from lockkit_core.keys import namespaced, stable_hash
from lockkit_core.lease import DEFAULT_WAIT, MIN_WAIT, next_wait, renew_interval, validity


class TestLease:
    def test_validity_keeps_a_margin_for_drift(self) -> None:
        assert validity(30.0) == pytest.approx(30.0 - 0.3 - 0.002)
        assert 0 < validity(0.1) < 0.1

    def test_renew_every_third_of_the_ttl(self) -> None:
        assert renew_interval(3.0) == pytest.approx(1.0)

    def test_wait_is_bounded_by_the_holders_lease_and_the_callers_timeout(self) -> None:
        assert next_wait(2.0, None) == 2.0
        assert next_wait(2.0, 0.5) == 0.5
        assert next_wait(None, None) == DEFAULT_WAIT
        assert next_wait(0.0, None) == MIN_WAIT
        assert next_wait(5.0, -1.0) == 0.0


class TestKeyTemplate:
    def test_fields_come_from_the_signature(self) -> None:
        def build(day: str, region: str = "eu") -> None: ...

        template = KeyTemplate("report:{day}:{region}")
        sig = template.check_signature(build)
        assert template.render(sig, ("2026-11-21",), {}) == "report:2026-11-21:eu"
        assert template.render(sig, (), {"day": "d", "region": "us"}) == "report:d:us"

    def test_attribute_and_index_access(self) -> None:
        @dataclasses.dataclass
        class User:
            id: int

        def act(user: User, payload: dict[str, str]) -> None: ...

        template = KeyTemplate("u:{user.id}:{payload[sku]}")
        sig = template.check_signature(act)
        assert template.render(sig, (User(7), {"sku": "A1"}), {}) == "u:7:A1"

    def test_unknown_field_fails_at_decoration(self) -> None:
        def build(day: str) -> None: ...

        with pytest.raises(ConfigError, match=r"names dya.*parameters are: day"):
            KeyTemplate("report:{dya}").check_signature(build)

    def test_kwargs_functions_accept_any_field_but_calls_must_supply_it(self) -> None:
        def build(**kwargs: str) -> None: ...

        template = KeyTemplate("r:{day}")
        sig = template.check_signature(build)
        assert template.render(sig, (), {"day": "x"}) == "r:x"
        with pytest.raises(ConfigError, match="needs 'day'"):
            template.render(sig, (), {})

    def test_positional_fields_are_refused(self) -> None:
        with pytest.raises(ConfigError, match="positional field"):
            KeyTemplate("r:{}")

    def test_callable_key(self) -> None:
        def build(a: int, b: int) -> None: ...

        template = KeyTemplate(lambda a, b: f"sum:{a + b}")
        assert template.render(template.check_signature(build), (1, 2), {}) == "sum:3"

    def test_namespacing_and_hashing(self) -> None:
        assert namespaced("shop", "order:1") == "shop:order:1"
        assert namespaced("", "order:1") == "order:1"
        assert stable_hash({"b": 1, "a": [1, 2]}) == stable_hash({"a": [1, 2], "b": 1})
        assert len(stable_hash("x")) == 32


class TestConfig:
    def test_defaults(self) -> None:
        cfg = LockKitConfig.from_mapping({})
        assert cfg.url == default_url()
        assert cfg.url.startswith("file://")
        assert (cfg.ttl, cfg.auto_renew, cfg.timeout, cfg.namespace) == (30.0, True, None, "")

    def test_keys_in_any_case_and_string_values(self) -> None:
        cfg = LockKitConfig.from_mapping(
            {"url": "memory://", "Ttl": "5", "AUTO_RENEW": "false", "timeout": "0"}
        )
        assert (cfg.url, cfg.ttl, cfg.auto_renew, cfg.timeout) == ("memory://", 5.0, False, 0.0)

    def test_explicit_overrides_win_and_unset_is_skipped(self) -> None:
        cfg = LockKitConfig.from_mapping({"TTL": 5}, ttl=9, namespace=UNSET)
        assert cfg.ttl == 9.0
        assert cfg.namespace == ""

    def test_none_timeout_and_zero_are_different(self) -> None:
        assert LockKitConfig.from_mapping({"TIMEOUT": None}).timeout is None
        assert LockKitConfig.from_mapping({"TIMEOUT": 0}).timeout == 0.0

    @pytest.mark.parametrize(
        ("mapping", "message"),
        [
            ({"URLS": "x"}, "unknown lockkit setting 'URLS'; known settings: URL"),
            ({"TTL": 0}, "TTL must be a positive number"),
            ({"TTL": -1}, "TTL must be a positive number"),
            ({"TTL": "soon"}, "TTL must be a number of seconds"),
            ({"AUTO_RENEW": "maybe"}, "AUTO_RENEW must be true or false"),
            ({"TIMEOUT": -2}, "timeout must be a positive number"),
            ({"OPTIONS": [1]}, "OPTIONS must be a mapping"),
            ({"url": "a", "URL": "b"}, "given twice"),
        ],
    )
    def test_bad_settings(self, mapping: dict[str, object], message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            LockKitConfig.from_mapping(mapping)


class TestParseUrl:
    def test_full_redis_url(self) -> None:
        url = parse_url("redis://user:p%40ss@127.0.0.1:6380/2?socket_timeout=1.5")
        assert (url.scheme, url.host, url.port, url.path) == ("redis", "127.0.0.1", 6380, "/2")
        assert (url.username, url.password) == ("user", "p@ss")
        assert url.query == {"socket_timeout": "1.5"}
        assert "p%40ss" not in url.redacted()
        assert url.redacted() == "redis://user:***@127.0.0.1:6380/2?socket_timeout=1.5"

    def test_scheme_is_case_insensitive(self) -> None:
        assert parse_url("REDIS://h:1/0").scheme == "redis"

    @pytest.mark.parametrize(
        ("raw", "message"),
        [
            ("127.0.0.1:6379", "expected 'scheme://...'"),
            ("redis://h:99999/0", "port must be a number"),
            ("redis://h:1/0?a=1&a=2", "sets option 'a' twice"),
            ("redis://h/0#x", "fragment"),
        ],
    )
    def test_malformed(self, raw: str, message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            parse_url(raw)

    def test_non_string(self) -> None:
        with pytest.raises(ConfigError, match="must be a string"):
            parse_url(6379)  # type: ignore[arg-type]


def test_every_lockkit_error_survives_pickling() -> None:
    """Celery's result backends and multiprocessing pickle exceptions: each comes back whole."""
    import pickle

    from lockkit_core.dedupe import TaskLocked
    from lockkit_core.errors import BackendNotInstalled, LockLost, LockTimeout
    from lockkit_django.problems import IdempotencyStoreDown, LockStoreDown, RequestLocked
    from lockkit_flask.errors import RequestLocked as FlaskRequestLocked

    errors: list[Exception] = [
        LockTimeout("order:7", "order:7 stayed busy for 5 s"),
        LockLost("order:7", "its lease ran out"),
        BackendNotInstalled("redis", "redis", "redis"),
        TaskLocked("task:sms", "abc-123", "sms(7) is already queued as abc-123"),
        RequestLocked("order:7", "pay", 3),
        LockStoreDown("order:7", "pay", 2),
        IdempotencyStoreDown("the cache", 1),
        FlaskRequestLocked("order:7", "pay", 4),
    ]
    for error in errors:
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error)
        assert str(back) == str(error)
        assert back.__dict__ == error.__dict__
        assert getattr(back, "key", None) == getattr(error, "key", None)


def test_renewals_fall_on_a_grid_between_a_quarter_and_a_third_of_the_ttl() -> None:
    from lockkit_core.lease import renew_at

    for now in (0.0, 0.01, 7.3, 1234.5678):
        due = renew_at(now, 3.0)
        assert now + 0.75 - 1e-9 <= due <= now + 1.0 + 1e-9
        assert abs(due / 0.25 - round(due / 0.25)) < 1e-6  # a multiple of ttl/12
    # acquisitions close together share one due time: one wake-up of the watchdog
    assert renew_at(100.01, 3.0) == renew_at(100.2, 3.0)
