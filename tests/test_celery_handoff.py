"""``Lock.hand_off``: the lease a queued task carries from the process that enqueued it."""

from __future__ import annotations

import time

import pytest

from lockkit_core import LockKit, LockNotOwned
from lockkit_core.testing import RedisServer

pytestmark = pytest.mark.redis


def test_hand_off_keeps_the_lease_for_an_adopter(redis_server: RedisServer) -> None:
    with LockKit(redis_server.url, namespace="handoff") as kit:
        lock = kit.lock("order:1", ttl=5, reentrant=False)
        assert lock.acquire(blocking=False)
        token = lock.hand_off(ttl=5)
        assert not lock.owned()
        assert kit.admin.info("order:1") is not None
        with LockKit(redis_server.url, namespace="handoff") as other:
            adopted = other.lock("order:1", owner=token, reentrant=False)
            assert adopted.acquire()
            adopted.release()
        assert kit.admin.info("order:1") is None


def test_hand_off_stops_renewal(redis_server: RedisServer) -> None:
    with LockKit(redis_server.url, namespace="handoff") as kit:
        lock = kit.lock("order:2", ttl=0.6, auto_renew=True, reentrant=False)
        assert lock.acquire(blocking=False)
        lock.hand_off(ttl=0.6)
        time.sleep(1.5)  # a renewed lease would still be held after two renewal periods
        assert kit.admin.info("order:2") is None


def test_hand_off_of_a_lock_not_held_raises(redis_server: RedisServer) -> None:
    with LockKit(redis_server.url, namespace="handoff") as kit, pytest.raises(LockNotOwned):
        kit.lock("order:3").hand_off()
