"""What every part of the contract suite shares: the fixtures, ``require`` and a recorder."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from ...backends.base import Capability
from ...kit import LockKit
from ...lock import Lock

__all__ = ["ContractBase", "KitFactory", "Recorder"]


class KitFactory(Protocol):
    """``make_kit(**kwargs)``: a new :class:`LockKit` on the test's store and namespace."""

    def __call__(self, **kwargs: Any) -> LockKit: ...


class Recorder:
    """An ``on_lost`` callback that remembers its calls and lets a test wait for the first."""

    def __init__(self) -> None:
        self.calls: list[Lock] = []
        self.threads: list[str] = []
        self.event = threading.Event()

    def __call__(self, lock: Lock) -> None:
        self.calls.append(lock)
        self.threads.append(threading.current_thread().name)
        self.event.set()


class ContractBase:
    """The fixtures each subject's tests use; see the package docstring."""

    @pytest.fixture
    def backend_url(self) -> str:
        """The store under test; each backend's test module overrides this."""
        raise NotImplementedError("the backend's test module must define a backend_url fixture")

    @pytest.fixture
    def namespace(self) -> str:
        """A namespace of this test's own."""
        return f"ct{uuid.uuid4().hex[:12]}"

    @pytest.fixture
    def make_kit(self, backend_url: str, namespace: str) -> Iterator[KitFactory]:
        """``make_kit(**kwargs)``: kits on the same store and namespace, closed afterwards."""
        kits: list[LockKit] = []

        def make(**kwargs: Any) -> LockKit:
            kwargs.setdefault("namespace", namespace)
            kwargs.setdefault("ttl", 10.0)
            kit = LockKit(backend_url, **kwargs)
            kits.append(kit)
            return kit

        yield make
        for kit in kits:
            kit.close()

    @staticmethod
    def require(kit: LockKit, capability: Capability) -> None:
        """Skip the test unless the backend declares ``capability``."""
        if capability not in kit.backend.capabilities:
            name = capability.name or str(capability)
            pytest.skip(f"the {kit.backend.url.scheme}:// backend does not declare {name}")
