"""Leases: expiry, extension, renewal by the watchdog, and holders finding out they lost it."""

from __future__ import annotations

import threading
import time

import pytest

from ...backends.base import Capability, owner_hint
from ...errors import LockLost, NotSupported
from ...lease import validity
from .fixtures import ContractBase, KitFactory, Recorder
from .workers import acquired_by_an_exited_process

__all__ = ["LeaseContract"]


def _sleep_until(moment: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``moment`` (at once if it has)."""
    time.sleep(max(0.0, moment - time.monotonic()))


class LeaseContract(ContractBase):
    """A lease bounds how long a holder blocks others, and a holder that loses it is told."""

    def test_ttl_expiry_lets_another_kit_take_over(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        self.require(a, Capability.TTL)
        # Both kits talk to the store once first: a new connection (and a table made on first
        # use) took up to 0.8 s on a loaded machine, which is no part of the lease's expiry.
        assert a.admin.info("lease") is None and b.admin.info("lease") is None
        first = a.lock("lease", ttl=0.3, auto_renew=False)
        before = time.monotonic()
        assert first.acquire()
        granted = time.monotonic()  # the store stamped the lease before it answered
        second = b.lock("lease", timeout=3)
        assert second.acquire() is True
        taken = time.monotonic()
        # Safety: nobody gets the key while the first holder may still trust its lease.
        assert taken >= before + validity(0.3)
        assert first.lost, "the old holder must already know when someone else has it"
        # Liveness: the lease ends at most 0.3 s after the grant came back; the taker sees it
        # within a poll, a notice or a watch, plus what a loaded machine adds.
        late = taken - granted - 0.3
        assert late < 0.5, f"taken {late:.3f} s after a 0.3 s lease ran out"
        if Capability.FENCING in a.backend.capabilities:
            assert first.token is not None and second.token is not None
            assert second.token > first.token
        with pytest.raises(LockLost):
            first.check()
        with pytest.raises(LockLost) as caught:
            first.release()
        assert caught.value.key == "lease"
        assert second.owned()
        info = b.admin.info("lease")
        assert info is not None and second.owner is not None
        assert info.owner_hint == owner_hint(second.owner)
        second.release()

    def test_extend_keeps_the_lock_past_its_original_ttl(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        self.require(a, Capability.TTL)
        # Times count from before the acquire, as the lease does: a slow first round trip (a
        # new connection on a loaded machine took 0.3 s) uses up part of the first ttl, not
        # the wait before the extension on top of it.
        held = a.lock("ext", ttl=0.6, auto_renew=False)
        start = time.monotonic()
        assert held.acquire()
        _sleep_until(start + 0.3)
        held.extend()  # another 0.6 s from now
        held.extend(1.2)
        _sleep_until(start + 0.9)  # past the first ttl
        held.check()
        assert held.owned()
        assert b.lock("ext").acquire(blocking=False) is False
        held.release()
        assert b.lock("ext").acquire(blocking=False) is True

    def test_release_of_an_expired_lock_raises_lock_lost(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        self.require(kit, Capability.TTL)
        held = kit.lock("expired", ttl=0.2, auto_renew=False)
        assert held.acquire()
        time.sleep(0.3)
        assert held.lost and not held.owned()
        with pytest.raises(LockLost) as caught:
            held.release()
        assert caught.value.key == "expired"
        assert "expired" in str(caught.value)
        assert kit.admin.info("expired") is None

    # -- lost-lock detection -------------------------------------------------------------------

    def test_lost_lock_is_detected_without_renewal(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        self.require(kit, Capability.TTL)
        lost = Recorder()
        lock = kit.lock("job", ttl=0.3, auto_renew=False, on_lost=lost)
        with pytest.raises(LockLost) as caught, lock:
            lock.check()
            time.sleep(0.4)
            assert lock.lost
            with pytest.raises(LockLost):
                lock.check()
        assert caught.value.key == "job"
        assert lost.event.wait(1.0), "on_lost was not called at the lease deadline"
        assert lost.calls == [lock]
        assert lost.threads[0] != threading.current_thread().name

    def test_auto_renew_keeps_a_short_lease_held(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        self.require(a, Capability.TTL)
        lost = Recorder()
        # Renewed every 0.25-0.33 s, lost only if no renewal lands for 1 s: a loaded machine's
        # late watchdog tick does not lose it (with 0.3 s, then 0.6 s, one did, on ZooKeeper
        # under two CPU burners); held 2.2 leases, so only renewals can keep it.
        with a.lock("renewed", ttl=1.0, auto_renew=True, on_lost=lost) as held:
            end = time.monotonic() + 2.2
            while time.monotonic() < end:
                assert b.lock("renewed").acquire(blocking=False) is False
                held.check()
                time.sleep(0.1)
            assert held.owned()
        assert not lost.calls
        assert b.lock("renewed").acquire(blocking=False) is True

    def test_force_release_makes_the_holder_find_out(self, make_kit: KitFactory) -> None:
        holder_kit, admin_kit, other = make_kit(), make_kit(), make_kit()
        lost = Recorder()
        held = holder_kit.lock("stuck", ttl=0.6, auto_renew=True, on_lost=lost)
        assert held.acquire()
        assert admin_kit.admin.force_release("stuck") is True
        assert admin_kit.admin.force_release("stuck") is False
        assert admin_kit.admin.info("stuck") is None
        taker = other.lock("stuck")
        assert taker.acquire(blocking=False) is True
        if Capability.FENCING in other.backend.capabilities:
            assert taker.token is not None and held.token is not None
            assert taker.token > held.token
        # The watchdog's next renewal (every ttl/3) finds the key gone.
        assert lost.event.wait(1.0), "the holder was not told its lock was force-released"
        with pytest.raises(LockLost):
            held.check()
        with pytest.raises(LockLost):
            held.release()
        assert taker.owned()
        info = admin_kit.admin.info("stuck")
        assert info is not None and info.token == taker.token
        taker.release()

    def test_force_release_then_release_raises_lock_lost(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        held = a.lock("stuck2", auto_renew=False)
        assert held.acquire()
        assert b.admin.force_release("stuck2")
        assert b.lock("stuck2").acquire(blocking=False)
        with pytest.raises(LockLost):
            held.release()
        assert b.admin.info("stuck2") is not None

    # -- no lease: ttl=None ----------------------------------------------------------------

    def test_ttl_none_holds_without_a_lease_or_is_not_supported(self, make_kit: KitFactory) -> None:
        """``ttl=None``: held until released, never expiring; a backend that cannot free a
        lease-less lock when its holder dies refuses it at ``lock()``."""
        a, b = make_kit(), make_kit()
        if Capability.NO_LEASE not in a.backend.capabilities:
            with pytest.raises(NotSupported, match=r"ttl=None"):
                a.lock("no-lease", ttl=None)
            with pytest.raises(NotSupported, match=r"ttl=None"):
                a.locked("no-lease", ttl=None)
            return
        lost = Recorder()
        held = a.lock("no-lease", ttl=None, on_lost=lost)
        assert held.ttl is None
        assert held.acquire()
        time.sleep(0.3)  # longer than any lease this test suite uses elsewhere
        held.check()
        assert held.owned() and not held.lost
        assert b.lock("no-lease").acquire(blocking=False) is False
        info = b.admin.info("no-lease")
        assert info is not None and info.ttl_remaining is None
        assert info.owner_hint == owner_hint(held.owner or "")
        # A waiter on a lease-less holder waits for the release, not for an expiry.
        got: list[bool] = []
        waiter = threading.Thread(target=lambda: got.append(b.lock("no-lease").acquire(timeout=5)))
        waiter.start()
        time.sleep(0.2)
        assert not got
        held.release()
        waiter.join(5)
        assert got == [True]
        assert not lost.calls

    def test_ttl_none_lock_is_freed_when_its_holder_process_ends(
        self, make_kit: KitFactory, backend_url: str, namespace: str
    ) -> None:
        kit = make_kit()
        self.require(kit, Capability.NO_LEASE)
        self.require(kit, Capability.CROSS_PROCESS)
        acquired_by_an_exited_process(backend_url, namespace, "no-lease-exit", None)
        # No lease to run out: the holder's end is what frees it, at once.
        assert kit.lock("no-lease-exit").acquire(blocking=False) is True

    def test_extend_gives_a_lease_less_lock_a_lease(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        self.require(a, Capability.NO_LEASE)
        held = a.lock("no-lease-ext", ttl=None, auto_renew=False)
        assert held.acquire()
        held.extend(0.3)
        info = b.admin.info("no-lease-ext")
        assert info is not None and info.ttl_remaining is not None
        assert info.ttl_remaining <= 0.3
        assert b.lock("no-lease-ext").acquire(timeout=3) is True
        assert held.lost
