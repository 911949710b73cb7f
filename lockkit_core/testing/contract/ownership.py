"""Ownership: owner tokens, adoption by another kit or process, and fencing tokens."""

from __future__ import annotations

import itertools
import secrets

import pytest

from ...backends.base import Capability, owner_hint
from ...errors import LockLost, LockNotOwned
from .fixtures import ContractBase, KitFactory
from .workers import acquired_by_an_exited_process

__all__ = ["OwnershipContract"]


class OwnershipContract(ContractBase):
    """Only the owner token releases or extends; it can travel; every grant is fenced."""

    def test_release_of_a_lock_not_held_raises_not_owned(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        with a.lock("mine") as held:
            stranger = b.lock("mine")
            with pytest.raises(LockNotOwned) as caught:
                stranger.release()
            assert type(caught.value) is LockNotOwned
            assert caught.value.key == "mine"
            with pytest.raises(LockNotOwned):
                stranger.extend()
            assert held.owned()
        with pytest.raises(LockNotOwned):
            held.release()

    def test_another_kit_can_release_and_extend_with_the_owner_token(
        self, make_kit: KitFactory
    ) -> None:
        a, b, c = make_kit(), make_kit(), make_kit()
        held = a.lock("celery:task", ttl=5, auto_renew=False)
        assert held.acquire()
        owner = held.owner
        assert owner is not None and len(owner) == 32

        wrong = b.lock("celery:task", owner=secrets.token_hex(16))
        with pytest.raises(LockNotOwned):
            wrong.release()
        with pytest.raises(LockNotOwned):
            wrong.extend(1.0)
        info = c.admin.info("celery:task")
        assert info is not None and info.owner_hint == owner_hint(owner)

        adopted = b.lock("celery:task", owner=owner)
        if Capability.TTL in b.backend.capabilities:
            adopted.extend(2.0)
            info = c.admin.info("celery:task")
            assert info is not None and info.ttl_remaining is not None
            assert 1.0 < info.ttl_remaining <= 2.0
        adopted.release()
        assert c.admin.info("celery:task") is None
        assert c.lock("celery:task").acquire(blocking=False) is True
        with pytest.raises(LockLost):
            held.release()  # its acquisition was ended elsewhere; c's lock is untouched
        assert c.admin.info("celery:task") is not None

    def test_owner_token_hand_off_outlives_the_acquiring_process(
        self, make_kit: KitFactory, backend_url: str, namespace: str
    ) -> None:
        kit = make_kit()
        self.require(kit, Capability.CROSS_PROCESS)
        self.require(kit, Capability.HAND_OFF)
        owner, token = acquired_by_an_exited_process(backend_url, namespace, "handoff", 5.0)
        # The process that took it is gone; the lease, not the process, says who holds it.
        assert kit.lock("handoff").acquire(blocking=False) is False
        info = kit.admin.info("handoff")
        assert info is not None and info.owner_hint == owner_hint(owner)
        adopted = kit.lock("handoff", owner=owner)
        adopted.extend(5.0)
        adopted.release()
        assert kit.admin.info("handoff") is None
        with kit.lock("handoff", timeout=0) as again:
            if token is not None:
                assert again.token is not None and again.token > token

    def test_backend_adopt_takes_over_only_a_live_lease_of_its_owner(
        self, make_kit: KitFactory
    ) -> None:
        """``Backend.adopt``: renews the owner's lease and (if it can) returns its token; a
        stranger, or anyone on a free key, gets ``Grant(False)`` and no holder is made."""
        kit = make_kit()
        backend = kit.backend
        key, free = kit.lock("adopted").full_key, kit.lock("not-held").full_key
        owner, stranger = secrets.token_hex(16), secrets.token_hex(16)
        assert backend.adopt(free, owner, 5.0).acquired is False
        assert kit.admin.info("not-held") is None
        granted = backend.try_acquire(key, owner, 5.0)
        assert granted.acquired
        assert backend.adopt(key, stranger, 5.0).acquired is False
        adopted = backend.adopt(key, owner, 2.0)
        assert adopted.acquired
        if adopted.token is not None:
            assert adopted.token == granted.token
        info = kit.admin.info("adopted")
        assert info is not None and info.owner_hint == owner_hint(owner)
        if Capability.TTL in backend.capabilities:
            assert info.ttl_remaining is not None and info.ttl_remaining <= 2.0
        assert backend.release(key, owner)
        assert backend.adopt(key, owner, 5.0).acquired is False
        assert kit.admin.info("adopted") is None

    def test_fencing_tokens_strictly_increase(self, make_kit: KitFactory) -> None:
        a, b = make_kit(), make_kit()
        self.require(a, Capability.FENCING)
        tokens: list[int] = []
        for i in range(30):
            kit = a if i % 2 else b
            with kit.lock("fence") as held:
                assert isinstance(held.token, int)
                tokens.append(held.token)
        assert all(later > earlier for earlier, later in itertools.pairwise(tokens))
        with a.lock("another-key") as other:
            assert isinstance(other.token, int)
