"""``Semaphore``: at most ``limit`` holders of a key at once, served in arrival order.

``with kit.semaphore("exports", limit=3, timeout=10): ...``. Every user of a key must pass the
same ``limit``. Needs a backend with ``Capability.SHARED`` (``zookeeper://``); elsewhere
``kit.semaphore()`` raises ``NotSupported``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .backends.base import Lease
from .errors import ConfigError
from .shared import SharedLock

if TYPE_CHECKING:
    from .config import Seconds
    from .kit import LockKit

__all__ = ["Semaphore"]


class Semaphore(SharedLock):
    """One place among ``limit`` on a key; a context manager like ``kit.lock()``."""

    def __init__(self, kit: LockKit, key: str, limit: int, timeout: Seconds) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(
                f"semaphore limit must be a whole number of at least 1, got {limit!r}"
            )
        super().__init__(kit, key, "slot", limit, timeout)

    def holders(self) -> list[Lease]:
        """Who holds the places now (at most ``limit``), in arrival order."""
        return self.kit.backend.shared_holders(self.full_key, "slot", self.limit)
