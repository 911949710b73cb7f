"""Batches: ``begin_run`` and ``end_run``, the steps that start and end a deduplicated task."""

from __future__ import annotations

from ...backends.base import Capability
from ...keys import namespaced
from ...lock import new_owner_token
from .fixtures import ContractBase, KitFactory

__all__ = ["BatchContract"]


class BatchContract(ContractBase):
    """The same answers as the calls a batch replaces, on every store."""

    def test_begin_run_takes_the_run_then_adopts_the_key(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        self.require(kit, Capability.HAND_OFF)
        backend = kit.backend
        run, key = namespaced(kit.namespace, "run:1"), namespaced(kit.namespace, "call:1")
        owner, first = new_owner_token(), new_owner_token()
        assert backend.try_acquire(key, owner, 5).acquired
        ran, kept = backend.begin_run(run, first, key, owner, 5)
        assert ran.acquired and kept.acquired
        if Capability.FENCING in backend.capabilities:
            lease = backend.info(key)
            assert lease is not None and kept.token == lease.token
        # a second copy: refused, its key untouched; a stranger's owner adopts nothing
        again = backend.begin_run(run, new_owner_token(), key, owner, 5)
        assert not again[0].acquired and not again[1].acquired
        other = backend.begin_run(
            namespaced(kit.namespace, "run:2"), new_owner_token(), key, new_owner_token(), 5
        )
        assert other[0].acquired and not other[1].acquired
        assert backend.end_run([(key, owner), (run, first)]) == [True, True]
        assert backend.info(key) is None and backend.info(run) is None

    def test_end_run_puts_its_marker_and_reports_what_it_no_longer_held(
        self, make_kit: KitFactory
    ) -> None:
        kit = make_kit()
        backend = kit.backend
        key, done = namespaced(kit.namespace, "call:1"), namespaced(kit.namespace, "done:1")
        owner, thief = new_owner_token(), new_owner_token()
        assert backend.try_acquire(key, owner, 5).acquired
        assert backend.force_release(key)
        assert backend.try_acquire(key, thief, 5).acquired
        assert backend.end_run([(key, owner)], (done, new_owner_token(), 5.0)) == [False]
        assert backend.info(done) is not None
        assert backend.release(key, thief)  # the new owner's lease was left alone

    def test_a_guarded_end_frees_nothing_once_its_guard_is_another_owners(
        self, make_kit: KitFactory
    ) -> None:
        kit = make_kit()
        self.require(kit, Capability.HAND_OFF)
        backend = kit.backend
        run, key = namespaced(kit.namespace, "run:1"), namespaced(kit.namespace, "call:1")
        owner, first, second = new_owner_token(), new_owner_token(), new_owner_token()
        assert backend.try_acquire(key, owner, 5).acquired
        assert backend.begin_run(run, first, key, owner, 5)[1].acquired
        # the first copy's run record is taken over (forced here; expired in a stalled
        # worker) by a second copy, which adopts the same key under the same owner token
        assert backend.force_release(run)
        assert backend.begin_run(run, second, key, owner, 5)[1].acquired
        assert backend.end_run([(key, owner)], guard=(run, first, 5.0)) == [False, False]
        assert backend.info(key) is not None, "the late end freed the second copy's key"
        assert backend.end_run([(key, owner)], guard=(run, second, 5.0)) == [True, True]
        assert backend.info(key) is None and backend.info(run) is None
