"""Waiting: wake-ups on release, non-blocking attempts, and timeouts honoured to the millisecond."""

from __future__ import annotations

import secrets
import threading
import time

import pytest

from ...backends.base import Capability
from ...errors import LockNotOwned, LockTimeout, LockUnavailable
from ...kit import LockKit
from .fixtures import ContractBase, KitFactory

__all__ = ["WaitingContract"]


class WaitingContract(ContractBase):
    """A waiter gets the lock soon after it is released and gives up when its timeout says."""

    def test_blocking_acquire_is_woken_when_released(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        # A store that polls lags its poll interval on every run; a loaded machine can
        # deschedule the waiter now and then. So one hand-over of three must come soon.
        lags = [self._hand_over_lag(a, b)]
        while lags[-1] >= 0.15 and len(lags) < 3:
            lags.append(self._hand_over_lag(a, b))
        assert 0 <= lags[-1] < 0.15, (
            "the waiter got the lock "
            + ", ".join(f"{lag:.3f}" for lag in lags)
            + " s after it was released"
        )

    @staticmethod
    def _hand_over_lag(a: LockKit, b: LockKit) -> float:
        """Seconds from a's release to b's blocking acquire returning."""
        holding = threading.Event()
        released_at: list[float] = []

        def hold_briefly() -> None:
            with a.lock("k"):
                holding.set()
                time.sleep(0.1)
                released_at.append(time.monotonic())

        holder = threading.Thread(target=hold_briefly)
        holder.start()
        try:
            assert holding.wait(5)
            waiter = b.lock("k", timeout=3)
            assert waiter.acquire() is True
            acquired_at = time.monotonic()
        finally:
            holder.join(5)
        waiter.release()
        return acquired_at - released_at[0]

    def test_a_release_between_the_attempt_and_the_wait_is_not_slept_through(
        self, make_kit: KitFactory
    ) -> None:
        """The waiter protocol at the backend: a waiter registered before its attempt is not
        put to sleep by a release that came after that attempt but before ``wait()``."""
        backend = make_kit().backend
        key = make_kit().lock("early").full_key
        holder, owner = secrets.token_hex(16), secrets.token_hex(16)
        assert backend.try_acquire(key, holder, 10.0).acquired
        waiter = backend.waiter(key, owner, False)
        acquired = False
        try:
            assert not backend.try_acquire(key, owner, 10.0).acquired
            assert backend.release(key, holder)
            start = time.monotonic()
            handed = waiter.wait(3.0)
            took = time.monotonic() - start
            if handed is not None:
                acquired = handed.acquired  # a queueing store handed it straight over
            else:
                acquired = backend.try_acquire(key, owner, 10.0).acquired
            assert took < 0.5, f"wait() slept {took:.2f} s through a release it came after"
            assert acquired
        finally:
            waiter.close(acquired)
        assert backend.release(key, owner)

    def test_fair_waiters_are_served_in_arrival_order(self, make_kit: KitFactory) -> None:
        holder_kit = make_kit()
        self.require(holder_kit, Capability.FAIR)
        kits = [make_kit() for _ in range(6)]
        order: list[int] = []
        errors: list[BaseException] = []

        def wait_turn(i: int) -> None:
            try:
                with kits[i].lock("fifo", fair=True, timeout=20):
                    order.append(i)
                    time.sleep(0.005)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=wait_turn, args=(i,)) for i in range(len(kits))]
        with holder_kit.lock("fifo"):
            for t in threads:
                t.start()
                time.sleep(0.15)  # arrival order: each queued well before the next comes
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "a fair waiter hung"
        assert not errors, errors[0]
        assert order == list(range(len(kits)))

    def test_non_blocking_acquire_returns_false_when_held(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        with a.lock("busy"):
            waiter = b.lock("busy")
            start = time.monotonic()
            assert waiter.acquire(blocking=False) is False
            assert waiter.acquire(timeout=0) is False
            assert time.monotonic() - start < 0.5
            assert waiter.token is None
            with pytest.raises(LockNotOwned):
                waiter.release()

    def test_timeout_is_honoured_within_50_ms(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        with a.lock("slow"):
            for waiter in (b.lock("slow", timeout=0.2), b.lock("slow")):
                # Never early, in any try; late by over 50 ms in every one of three: a busy
                # machine can hold up the last store call once, a wait that overruns always does.
                late = []
                for _ in range(3):
                    start = time.monotonic()
                    got = waiter.acquire() if waiter.timeout else waiter.acquire(timeout=0.2)
                    elapsed = time.monotonic() - start
                    assert got is False
                    assert elapsed >= 0.2, f"timeout=0.2 returned early, after {elapsed:.3f} s"
                    if elapsed <= 0.25:
                        break
                    late.append(f"{elapsed:.3f}")
                else:
                    pytest.fail(f"timeout=0.2 returned after {', '.join(late)} s")

    def test_with_block_raises_lock_timeout_carrying_the_key(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        body_ran = False
        with (
            a.lock("invoice:7"),
            pytest.raises(LockTimeout) as caught,
            b.lock("invoice:7", timeout=0.05),
        ):
            body_ran = True
        assert not body_ran
        err = caught.value
        assert isinstance(err, TimeoutError)
        assert isinstance(err, LockUnavailable)
        assert err.key == "invoice:7"
        assert "invoice:7" in str(err)
