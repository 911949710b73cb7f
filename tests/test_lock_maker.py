"""``kit.lock_maker``: handles made with options checked once, as ``kit.lock`` makes them."""

from __future__ import annotations

import pytest

from lockkit_core import ConfigError, LockKit, LockNotOwned, NotSupported


def test_its_handles_are_kit_lock_handles_with_those_options() -> None:
    with LockKit("memory://", namespace="shop", ttl=5.0) as kit:
        make = kit.lock_maker(ttl=2.0, reentrant=False, template="order:{order_id}")
        first, second = make("order:1"), make("order:1")
        plain = kit.lock("order:1", ttl=2.0, reentrant=False, template="order:{order_id}")
        for handle in (first, second):
            assert (handle.key, handle.full_key, handle.ttl) == ("order:1", "shop:order:1", 2.0)
            assert (handle.timeout, handle.auto_renew, handle.fair) == (
                plain.timeout,
                plain.auto_renew,
                plain.fair,
            )
            assert handle.reentrant is False
            assert handle.labels is plain.labels
        assert first.on_lost is not second.on_lost  # a hook added to one is not the other's
        assert first.acquire(timeout=0)
        assert not second.acquire(timeout=0)  # the same key: excluded as usual
        first.release()
        assert second.acquire(timeout=0)
        second.release()


def test_a_bad_option_fails_when_the_maker_is_made_and_a_bad_key_when_a_handle_is() -> None:
    # No server is needed: nothing is sent before a handle acquires.
    kit = LockKit("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(NotSupported, match="ttl=None"):
            kit.lock_maker(ttl=None)
        with pytest.raises(TypeError, match="template must be a str"):
            kit.lock_maker(template=3)  # type: ignore[arg-type]
        make = kit.lock_maker(ttl=1.0)
        with pytest.raises(ConfigError, match="NUL"):
            make("order:\x00")
    finally:
        kit.close()


def test_a_handle_made_with_an_owner_adopts_that_acquisition_as_kit_lock_does() -> None:
    with LockKit("memory://", namespace="shop", ttl=5.0) as kit:
        taken = kit.lock("job:1", reentrant=False)
        assert taken.acquire(timeout=0)
        owner = taken.hand_off()
        make = kit.lock_maker(ttl=2.0, auto_renew=True, reentrant=False)
        adopted = make("job:1", owner)
        assert (adopted.auto_renew, adopted.ttl) == (True, 2.0)
        assert adopted.acquire() and adopted.owned()
        adopted.release()
        with pytest.raises(LockNotOwned):
            make("job:1", owner).acquire()  # released: nothing left to adopt
        with pytest.raises(ConfigError, match="32-character token"):
            make("job:1", "short")
        with pytest.raises(ConfigError, match="auto_renew must be True or False"):
            kit.lock_maker(auto_renew="yes")
