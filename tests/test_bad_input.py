"""Wrong input fails early, with a typed error whose message says what to do."""

from __future__ import annotations

import math
import sys
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from lockkit_core import (
    Backend,
    BackendNotInstalled,
    Capability,
    ConfigError,
    Grant,
    Lease,
    LockKit,
    LockKitConfig,
    LockURL,
    NotSupported,
    known_schemes,
)
from lockkit_core import registry as registry_module
from lockkit_core.backends.memory import MemoryBackend


@pytest.fixture
def kit() -> LockKit:
    return LockKit(f"memory://bad-input-{uuid.uuid4().hex[:8]}", ttl=5)


class GhostBackend(Backend):
    """A backend whose driver is never installed."""

    schemes: ClassVar[tuple[str, ...]] = ("ghost",)
    extra: ClassVar[str | None] = "ghost"
    requires: ClassVar[str | None] = "lockkit_ghost_driver_that_does_not_exist"

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        raise AssertionError("a backend whose driver is missing must not be constructed")

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        raise NotImplementedError

    def release(self, key: str, owner: str) -> bool:
        raise NotImplementedError

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        raise NotImplementedError

    def list(self, prefix: str) -> list[Lease]:
        raise NotImplementedError

    def info(self, key: str) -> Lease | None:
        raise NotImplementedError

    def force_release(self, key: str) -> bool:
        raise NotImplementedError


class NotABackend:
    pass


# -- URLs and schemes ------------------------------------------------------------------------


def test_unknown_scheme_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        LockKit("mongodb://127.0.0.1/locks")
    message = str(caught.value)
    assert "mongodb://" in message
    for scheme in ("memory://", "file://", "redis://", "rediss://", "unix://"):
        assert scheme in message
    assert set(known_schemes()) >= {"memory", "file", "redis"}


@pytest.mark.parametrize("url", ["localhost:6379", "redis:/127.0.0.1", "", "   "])
def test_malformed_url_shows_an_example(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LockKit(url)
    message = str(caught.value)
    assert "URL" in message
    if url.strip():
        assert "scheme://" in message and "redis://127.0.0.1:6379/0" in message


def test_bad_port_is_named() -> None:
    with pytest.raises(ConfigError, match="port must be a number from 1 to 65535"):
        LockKit("redis://127.0.0.1:99999/0")


def test_url_must_be_a_string() -> None:
    with pytest.raises(ConfigError, match="URL must be a non-empty string"):
        LockKit(6379)


def test_url_fragment_is_rejected() -> None:
    with pytest.raises(ConfigError, match="fragment"):
        LockKit("memory://x#frag")


def test_option_given_twice_is_rejected() -> None:
    with pytest.raises(ConfigError, match="twice"):
        LockKit("redis://127.0.0.1:6379/0?socket_timeout=1&socket_timeout=2")


# -- options ---------------------------------------------------------------------------------


def test_unknown_url_option_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        LockKit("redis://127.0.0.1:6379/0?sockettimeout=1")
    message = str(caught.value)
    assert "'sockettimeout'" in message
    assert "socket_timeout" in message and "socket_connect_timeout" in message
    with pytest.raises(ConfigError, match=r"unknown option 'colour'.*\(none\)"):
        LockKit("memory://x?colour=blue")


def test_unknown_option_in_options_mapping_is_rejected() -> None:
    with pytest.raises(ConfigError, match="unknown option 'sokcet_timeout'"):
        LockKit("redis://127.0.0.1:6379/0", options={"sokcet_timeout": 1})


def test_option_of_the_wrong_type_says_which_type() -> None:
    with pytest.raises(ConfigError, match="option 'socket_timeout' must be float, got 'soon'"):
        LockKit("redis://127.0.0.1:6379/0?socket_timeout=soon")


def test_an_int_is_accepted_for_a_float_option_but_a_bool_is_not() -> None:
    url = "redis://127.0.0.1:6379/0"
    kit = LockKit.from_config({"URL": url, "OPTIONS": {"socket_timeout": 5}})
    try:
        assert kit.backend.options["socket_timeout"] == 5.0
        assert type(kit.backend.options["socket_timeout"]) is float
    finally:
        kit.close()
    with pytest.raises(ConfigError, match="option 'socket_timeout' must be float, got True"):
        LockKit.from_config(
            {"URL": "redis://127.0.0.1:6379/0", "OPTIONS": {"socket_timeout": True}}
        )


# -- settings ---------------------------------------------------------------------------------


def test_unknown_setting_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        LockKitConfig.from_mapping({"URL": "memory://", "TLL": 5})
    message = str(caught.value)
    assert "'TLL'" in message
    for name in ("URL", "NAMESPACE", "TTL", "AUTO_RENEW", "TIMEOUT", "OPTIONS"):
        assert name in message
    with pytest.raises(ConfigError, match="unknown lockkit setting 'tll'"):
        LockKitConfig.from_mapping({}, tll=5)


def test_setting_given_twice_in_different_case() -> None:
    with pytest.raises(ConfigError, match="TTL is given twice"):
        LockKitConfig.from_mapping({"ttl": 5, "TTL": 6})


@pytest.mark.parametrize(
    ("mapping", "fragment"),
    [
        ({"AUTO_RENEW": "sometimes"}, "AUTO_RENEW must be true or false"),
        ({"TTL": "thirty"}, "TTL must be a number of seconds"),
        ({"TTL": "-5"}, "TTL must be a positive number of seconds"),
        ({"TIMEOUT": -2}, "timeout must be a positive number of seconds"),
        ({"OPTIONS": "socket_timeout=1"}, "OPTIONS must be a mapping"),
        ({"NAMESPACE": 7}, "NAMESPACE must be a string"),
    ],
)
def test_bad_setting_values(mapping: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        LockKitConfig.from_mapping({"URL": "memory://", **mapping})


# -- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ttl", [-1, 0, 0.0, math.nan, math.inf, "30", True])
def test_ttl_must_be_a_positive_number(kit: LockKit, ttl: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        kit.lock("k", ttl=ttl)
    assert "ttl must be a positive number of seconds" in str(caught.value)
    with pytest.raises(ConfigError, match="ttl must be a positive number of seconds"):
        LockKit("memory://", ttl=ttl)


def test_ttl_none_is_a_lock_without_a_lease_not_a_kit_default(kit: LockKit) -> None:
    # Per lock, None asks for no lease (DESIGN's kit.lock(key, ttl=None)); the kit's
    # default stays a number, so that no store refuses every lock of a kit.
    with kit.lock("k", ttl=None) as held:
        assert held.ttl is None
    with pytest.raises(ConfigError, match=r"kit\.lock\(key, ttl=None\)"):
        LockKit("memory://", ttl=None)


@pytest.mark.parametrize("timeout", [-0.5, math.nan, math.inf, "5", True])
def test_timeout_must_be_a_positive_number_or_none(kit: LockKit, timeout: Any) -> None:
    with pytest.raises(ConfigError, match=r"timeout must be a .*number of seconds"):
        kit.lock("k", timeout=timeout)
    with pytest.raises(ConfigError, match=r"timeout must be a .*number of seconds"):
        kit.lock("k").acquire(timeout=timeout)


def test_acquire_rejects_a_bool_timeout(kit: LockKit) -> None:
    # acquire(timeout=False) must not quietly mean "do not wait": kit.lock(timeout=False)
    # is refused already.
    with pytest.raises(ConfigError, match=r"timeout must be a .*number of seconds"):
        kit.lock("k", timeout=False)
    with pytest.raises(ConfigError, match=r"timeout must be a .*number of seconds"):
        kit.lock("k").acquire(timeout=False)


def test_negative_timeout_hints_at_none(kit: LockKit) -> None:
    with pytest.raises(ConfigError, match="use None or -1 to wait forever"):
        kit.lock("k", timeout=-3)


def test_non_blocking_acquire_takes_no_timeout(kit: LockKit) -> None:
    with pytest.raises(ConfigError, match="takes no timeout"):
        kit.lock("k").acquire(blocking=False, timeout=1.0)


def test_extend_with_a_bad_ttl(kit: LockKit) -> None:
    with kit.lock("k") as held, pytest.raises(ConfigError, match="ttl must be a positive"):
        held.extend(-1)


# -- keys -------------------------------------------------------------------------------------


def test_empty_key_is_a_config_error(kit: LockKit) -> None:
    with pytest.raises(ConfigError, match=r"non-empty string, e\.g\. 'order:42'"):
        kit.lock("")


def test_key_with_nul_is_a_config_error(kit: LockKit) -> None:
    with pytest.raises(ConfigError, match="NUL"):
        kit.lock("a\x00b")


@pytest.mark.parametrize("key", [42, b"order:1", None, ("order", 1)])
def test_non_string_key_is_a_type_error(kit: LockKit, key: Any) -> None:
    with pytest.raises(TypeError) as caught:
        kit.lock(key)
    message = str(caught.value)
    assert "lock keys must be str" in message
    assert "kit.lock(f'order:{order_id}')" in message
    with pytest.raises(TypeError, match="lock keys must be str"):
        kit.admin.info(key)


def test_admin_prefix_must_be_a_string(kit: LockKit) -> None:
    with pytest.raises(TypeError, match="prefix must be str"):
        kit.admin.list(7)  # type: ignore[arg-type]


# -- templates --------------------------------------------------------------------------------


def test_template_placeholder_the_function_lacks(kit: LockKit) -> None:
    with pytest.raises(ConfigError) as caught:

        @kit.locked("invoice:{invoice_id}")
        def pay(order_id: int) -> None: ...

    message = str(caught.value)
    assert "invoice_id" in message
    assert "its parameters are: order_id" in message


def test_template_placeholder_missing_from_the_call(kit: LockKit) -> None:
    @kit.locked("invoice:{invoice_id}")
    def pay(**fields: Any) -> str:
        return "paid"

    with pytest.raises(ConfigError) as caught:
        pay(order_id=1)
    assert "needs 'invoice_id'" in str(caught.value)
    assert "did not pass" in str(caught.value)
    assert pay(invoice_id=7) == "paid"


def test_positional_template_field_asks_for_a_name(kit: LockKit) -> None:
    with pytest.raises(ConfigError, match=r"positional field \{0\}.*name the argument"):
        kit.locked("report:{0}")


def test_malformed_template(kit: LockKit) -> None:
    with pytest.raises(ConfigError, match="malformed"):
        kit.locked("report:{day")


def test_template_filling_to_an_empty_key(kit: LockKit) -> None:
    @kit.locked("{day}")
    def build(day: str) -> None: ...

    with pytest.raises(ConfigError, match="non-empty"):
        build("")


def test_coroutine_function_templates_are_checked(kit: LockKit) -> None:
    # @kit.locked takes coroutine functions (it awaits the lock), with the same checks.
    with pytest.raises(ConfigError, match=r"names m, which .*job' does not take"):

        @kit.locked("job:{m}")
        async def job(n: int) -> None: ...


# -- other lock() arguments ---------------------------------------------------------------------


def test_owner_must_be_a_token(kit: LockKit) -> None:
    with pytest.raises(ConfigError, match="owner must be the 32-character token"):
        kit.lock("k", owner="me")


def test_on_lost_must_be_callable(kit: LockKit) -> None:
    with pytest.raises(ConfigError, match="on_lost must be a callable"):
        kit.lock("k", on_lost=["not callable"])  # type: ignore[list-item]


def test_auto_renew_must_be_a_bool(kit: LockKit) -> None:
    with pytest.raises(ConfigError, match="auto_renew must be True or False"):
        kit.lock("k", auto_renew="yes")


class UnfairBackend(MemoryBackend):
    """A memory store that declares no FIFO queue, as a store without one would."""

    capabilities = MemoryBackend.capabilities & ~Capability.FAIR


def test_fair_where_the_backend_cannot_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry_module._BUILTIN, "unfair", f"{__name__}:UnfairBackend")
    kit = LockKit("unfair://")
    with pytest.raises(NotSupported) as caught:
        kit.lock("k", fair=True)
    assert "fair=True" in str(caught.value) and "unfair://" in str(caught.value)
    assert kit.lock("k").acquire(blocking=False)


# -- missing drivers and broken registrations ---------------------------------------------------


def test_missing_extra_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry_module._BUILTIN, "ghost", f"{__name__}:GhostBackend")
    assert "ghost" in known_schemes()
    with pytest.raises(BackendNotInstalled) as caught:
        LockKit("ghost://somewhere/locks")
    err = caught.value
    assert isinstance(err, ConfigError)
    assert err.extra == "ghost" and err.scheme == "ghost"
    assert err.module == "lockkit_ghost_driver_that_does_not_exist"
    assert 'pip install "lockkit[ghost]"' in str(err)
    assert "lockkit_ghost_driver_that_does_not_exist" in str(err)
    assert isinstance(err.__cause__, ImportError)


def test_missing_redis_driver_names_the_redis_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis now raises ImportError
    with pytest.raises(BackendNotInstalled) as caught:
        LockKit("redis://127.0.0.1:6379/0")
    assert 'pip install "lockkit[redis]"' in str(caught.value)
    assert "'redis'" in str(caught.value)


def test_registered_target_that_is_not_a_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry_module._BUILTIN, "bogus", f"{__name__}:NotABackend")
    with pytest.raises(ConfigError, match="is not a lockkit Backend"):
        LockKit("bogus://x")
