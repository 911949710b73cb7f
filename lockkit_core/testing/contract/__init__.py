"""The contract every backend passes: one suite, run against each store for real.

A backend's test module subclasses :class:`LockContract` and provides a ``backend_url``
fixture (a string naming a store only that module's tests use)::

    class TestMemoryContract(LockContract):
        @pytest.fixture
        def backend_url(self) -> str:
            return f"memory://contract-{uuid.uuid4().hex}"

``make_kit(**kwargs)`` builds kits on that same store under one namespace per test; override
it to pass backend options. Tests needing a capability the backend does not declare
(``TTL``, ``FENCING``, ``LIST``, ``CROSS_PROCESS``) are skipped with the reason.

The tests live in one module per subject, each a mixin over :class:`ContractBase` (the
fixtures): ``exclusion``, ``waiting``, ``reentrancy``, ``leases``, ``ownership``,
``decorator``, ``fork``, ``admin`` and ``batches``. Process workers live in ``workers`` at
module level so the ``spawn`` start method can pickle them.
"""

from __future__ import annotations

from . import _rewrite  # noqa: F401  - first: pytest must see the modules below imported
from .admin import AdminContract
from .batches import BatchContract
from .decorator import DecoratorContract
from .exclusion import ExclusionContract
from .fixtures import ContractBase, KitFactory
from .fork import ForkContract
from .leases import LeaseContract
from .ownership import OwnershipContract
from .reentrancy import ReentrancyContract
from .waiting import WaitingContract
from .workers import acquire_and_exit, exclusion_worker, increment_under_lock

__all__ = [
    "AdminContract",
    "BatchContract",
    "ContractBase",
    "DecoratorContract",
    "ExclusionContract",
    "ForkContract",
    "KitFactory",
    "LeaseContract",
    "LockContract",
    "OwnershipContract",
    "ReentrancyContract",
    "WaitingContract",
    "acquire_and_exit",
    "exclusion_worker",
    "increment_under_lock",
]


class LockContract(
    ExclusionContract,
    ReentrancyContract,
    WaitingContract,
    LeaseContract,
    OwnershipContract,
    DecoratorContract,
    ForkContract,
    AdminContract,
    BatchContract,
):
    """Every subject's tests together: what a backend's test module subclasses."""
