"""Reentrancy: per thread for ``reentrant=True`` handles, none for ``reentrant=False``."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ...errors import LockNotOwned
from .fixtures import ContractBase, KitFactory

__all__ = ["ReentrancyContract"]


class ReentrancyContract(ContractBase):
    """A thread re-entering its own lock touches the store once; other threads are excluded."""

    def test_reentrant_per_thread_touches_the_store_once(
        self, make_kit: KitFactory, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        kit, other_kit = make_kit(), make_kit()
        backend = kit.backend
        calls = {"try_acquire": 0, "release": 0}
        real_try, real_release = backend.try_acquire, backend.release

        def counting_try(key: str, owner: str, ttl: float) -> Any:
            calls["try_acquire"] += 1
            return real_try(key, owner, ttl)

        def counting_release(key: str, owner: str) -> bool:
            calls["release"] += 1
            return real_release(key, owner)

        monkeypatch.setattr(backend, "try_acquire", counting_try)
        monkeypatch.setattr(backend, "release", counting_release)

        def other_thread_gets_it() -> bool:
            result: list[bool] = []
            t = threading.Thread(
                target=lambda: result.append(kit.lock("r").acquire(blocking=False))
            )
            t.start()
            t.join(10)
            got = result[0]
            if got:
                # give it back from that thread's hold: not expected, but do not leak it
                kit.backend.force_release(kit.lock("r").full_key)
            return got

        outer = kit.lock("r")
        inner = kit.lock("r")
        assert outer.acquire(blocking=False)
        assert inner.acquire(blocking=False)
        assert outer.acquire(timeout=0.1)
        assert calls["try_acquire"] == 1
        assert inner.token == outer.token
        assert other_thread_gets_it() is False
        assert other_kit.lock("r").acquire(blocking=False) is False

        inner.release()
        assert outer.owned()
        assert other_thread_gets_it() is False
        outer.release()
        assert outer.owned(), "one level of reentrancy is still held"
        assert other_thread_gets_it() is False
        assert calls["release"] == 0
        outer.release()
        assert calls["release"] == 1
        assert not outer.owned()
        with pytest.raises(LockNotOwned):
            outer.release()
        assert other_kit.lock("r").acquire(blocking=False) is True

    def test_non_reentrant_handles_exclude_the_same_thread(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        first = kit.lock("nr", reentrant=False)
        second = kit.lock("nr", reentrant=False)
        assert first.acquire(blocking=False)
        assert second.acquire(blocking=False) is False
        first.release()
        assert second.acquire(blocking=False) is True
        second.release()
