"""``Semaphore``: at most ``limit`` holders of a key at once, served in arrival order.

``with kit.semaphore("exports", limit=3, timeout=10): ...``. Every user of a key must pass the
same ``limit``. Each place is a lease like a plain lock's (ttl, renewal, ``on_lost``, owner
tokens; see :mod:`lockkit_core.shared`). Like ``threading.Semaphore`` a place belongs to its
acquisition, not to a thread: it never re-enters, and any thread may release it. Needs a
backend with ``Capability.SHARED``; elsewhere ``kit.semaphore()`` raises ``NotSupported``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .backends.base import Lease
from .errors import ConfigError
from .shared import SharedLock

if TYPE_CHECKING:
    from .kit import LockKit

__all__ = ["Semaphore", "check_limit"]


def check_limit(limit: object) -> int:
    """A semaphore's ``limit``: a whole number of at least 1."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"semaphore limit must be a whole number of at least 1, got {limit!r}")
    return limit


class Semaphore(SharedLock):
    """One place among ``limit`` on a key; a context manager like ``kit.lock()``."""

    def __init__(self, kit: LockKit, key: str, limit: int, options: dict[str, Any]) -> None:
        parts = kit.shared_parts("slot", limit)
        super().__init__(parts, key, mode="slot", limit=limit, reentrant=False, options=options)

    def holders(self) -> list[Lease]:
        """Who holds the places now (at most ``limit``), in arrival order."""
        return self.shared.kit.backend.shared_holders(self.full_key, "slot", self.limit)
