"""The same bad argument gets the same typed error wherever it is passed: a ttl, a timeout or a
key, to kit.lock(), @kit.locked, extend(), LockKit(), LockKit.from_config() and the config."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest

from lockkit_core import (
    ConfigError,
    LockKit,
    LockKitConfig,
)


@pytest.fixture
def kit() -> LockKit:
    return LockKit(f"memory://bad-input-{uuid.uuid4().hex[:8]}", ttl=5)


def _every_place_a_ttl_goes(kit: LockKit, ttl: Any) -> list[Any]:
    held = kit.lock("held-for-extend", auto_renew=False)
    assert held.acquire(timeout=0)
    places = [
        lambda: kit.lock("k", ttl=ttl),
        lambda: kit.locked("k", ttl=ttl),
        lambda: held.extend(ttl),
        lambda: LockKit("memory://", ttl=ttl),
        lambda: LockKit.from_config({"URL": "memory://", "TTL": ttl}),
        lambda: LockKitConfig(ttl=ttl),
    ]
    return places


@pytest.mark.parametrize("ttl", [0.002, 0.0099, -1, 0, math.nan, math.inf, True, "soon"])
def test_a_bad_ttl_is_a_config_error_everywhere(kit: LockKit, ttl: Any) -> None:
    for place in _every_place_a_ttl_goes(kit, ttl):
        with pytest.raises(ConfigError, match=r"(?i)ttl"):
            place()


@pytest.mark.parametrize("ttl", [0.002, 0.005, 0.0099])
def test_a_ttl_below_the_minimum_names_the_minimum(kit: LockKit, ttl: float) -> None:
    for place in _every_place_a_ttl_goes(kit, ttl):
        with pytest.raises(ConfigError, match=r"at least 0\.01 s"):
            place()


def test_the_minimum_ttl_itself_is_accepted(kit: LockKit) -> None:
    from lockkit_core.lease import MIN_TTL, validity

    assert validity(MIN_TTL) > 0
    with kit.lock("k", ttl=MIN_TTL, auto_renew=False) as held:
        held.extend(MIN_TTL)
    LockKit("memory://", ttl=MIN_TTL).close()


@pytest.mark.parametrize("timeout", [-0.5, -2, math.nan, math.inf, True, False, "soon"])
def test_a_bad_timeout_is_a_config_error_everywhere(kit: LockKit, timeout: Any) -> None:
    places = [
        lambda: kit.lock("k", timeout=timeout),
        lambda: kit.lock("k").acquire(timeout=timeout),
        lambda: kit.locked("k", timeout=timeout),
        lambda: LockKit("memory://", timeout=timeout),
        lambda: LockKit.from_config({"URL": "memory://", "TIMEOUT": timeout}),
    ]
    for place in places:
        with pytest.raises(ConfigError, match=r"(?i)timeout"):
            place()


def test_timeout_minus_one_waits_forever_everywhere(kit: LockKit) -> None:
    import threading

    assert kit.lock("k", timeout=-1).timeout is None
    assert LockKit("memory://", timeout=-1).config.timeout is None
    assert LockKit.from_config({"URL": "memory://", "TIMEOUT": -1}).config.timeout is None
    cases: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = [
        (kit.lock("k"), (), {"timeout": -1}),
        (kit.lock("k", timeout=-1), (), {}),
        (kit.lock("k"), (True, -1), {}),
    ]
    for handle, args, kwargs in cases:
        holder = kit.lock("k", reentrant=False)  # released from the timer's thread
        assert holder.acquire(timeout=0)
        threading.Timer(0.2, holder.release).start()
        assert handle.acquire(*args, **kwargs) is True
        handle.release()
    last = kit.lock("k")
    assert last.acquire(blocking=False, timeout=-1)  # threading.Lock's default
    last.release()


@pytest.mark.parametrize("key", ["\ud800", "order:\udfff", "a\ud83dz"])
def test_a_key_that_is_not_utf8_is_a_config_error_everywhere(kit: LockKit, key: str) -> None:
    with pytest.raises(ConfigError, match="UTF-8"):
        kit.lock(key)
    with pytest.raises(ConfigError, match="UTF-8"):
        kit.admin.info(key)
    with pytest.raises(ConfigError, match="UTF-8"):
        kit.admin.force_release(key)
    with pytest.raises(ConfigError, match="UTF-8"):
        kit.locked(key)

    @kit.locked("name:{name}")
    def greet(name: str) -> str:
        return name

    with pytest.raises(ConfigError, match="UTF-8"):
        greet(key)
    assert greet("ok") == "ok"
