"""Admin: ``info``, ``list`` and ``force_release`` as the CLI and framework commands use them."""

from __future__ import annotations

import time

import pytest

from ...backends.base import Capability, owner_hint
from .fixtures import ContractBase, KitFactory

__all__ = ["AdminContract"]


class AdminContract(ContractBase):
    """What an operator sees of held locks, inside one namespace."""

    def test_admin_info_and_list(self, make_kit: KitFactory, namespace: str) -> None:
        kit = make_kit()
        admin = make_kit().admin
        assert admin.info("a:1") is None
        held = [kit.lock(name, ttl=5, auto_renew=False) for name in ("a:1", "a:2", "b:1")]
        for lock in held:
            assert lock.acquire()
        info = admin.info("a:1")
        assert info is not None
        assert info.key == "a:1"
        assert info.stored_key.startswith(namespace)
        assert info.stored_key.endswith("a:1")
        owner = held[0].owner
        assert owner is not None and info.owner_hint and info.owner_hint == owner_hint(owner)
        assert len(info.owner_hint) < len(owner)
        if Capability.FENCING in kit.backend.capabilities:
            assert info.token == held[0].token
        if Capability.TTL in kit.backend.capabilities:
            assert info.ttl_remaining is not None and 0 < info.ttl_remaining <= 5.0
        if Capability.LIST in kit.backend.capabilities:
            assert [i.key for i in admin.list("a:")] == ["a:1", "a:2"]
            assert [i.key for i in admin.list()] == ["a:1", "a:2", "b:1"]
            assert admin.list("zzz") == []
            held[1].release()
            assert [i.key for i in admin.list()] == ["a:1", "b:1"]
        else:
            held[1].release()
        assert admin.info("a:2") is None
        assert admin.force_release("b:1") is True
        assert admin.info("b:1") is None
        assert admin.force_release("b:1") is False
        held[0].release()

    def test_admin_shows_when_the_holder_took_it(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        admin = make_kit().admin
        before = time.time()
        lock = kit.lock("aged", ttl=5, auto_renew=False)
        assert lock.acquire()
        after = time.time()
        info = admin.info("aged")
        assert info is not None and info.started is not None, "the store keeps no start time"
        # The store's clock on this host: within a second of ours (SQL stores keep their own).
        assert before - 1.0 <= info.started <= after + 1.0
        age = info.age()
        assert age is not None and 0.0 <= age < 5.0
        if Capability.TTL in kit.backend.capabilities:
            lock.extend(5)  # an extension is no new start
            again = admin.info("aged")
            assert again is not None and again.started == pytest.approx(info.started, abs=1e-3)
        if Capability.LIST in kit.backend.capabilities:
            [listed] = admin.list("aged")
            assert listed.started == pytest.approx(info.started, abs=1e-3)
        lock.release()
        assert admin.info("aged") is None

    def test_admin_list_stays_inside_the_namespace(
        self, make_kit: KitFactory, namespace: str
    ) -> None:
        mine = make_kit()
        self.require(mine, Capability.LIST)
        theirs = make_kit(namespace=namespace + "x")
        with mine.lock("job:1"), theirs.lock("job:1"), theirs.lock("job:2"):
            assert [i.key for i in mine.admin.list()] == ["job:1"]
            assert [i.key for i in theirs.admin.list("job:")] == ["job:1", "job:2"]
