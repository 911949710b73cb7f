"""``RWLock``: readers share a key, a writer has it alone, in arrival order.

``with kit.rwlock("catalog").read(timeout=5): ...`` / ``.write(timeout=5)``. A reader that
comes after a waiting writer waits behind it, so writers are not starved. Needs a backend with
``Capability.SHARED`` (``zookeeper://``); elsewhere ``kit.rwlock()`` raises ``NotSupported``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .backends.base import Lease
from .config import UNSET, Seconds
from .keys import check_key, namespaced
from .shared import SharedLock

if TYPE_CHECKING:
    from .kit import LockKit

__all__ = ["RWLock"]


class RWLock:
    """A read-write lock on one key; each ``read()``/``write()`` is a new handle."""

    def __init__(self, kit: LockKit, key: str) -> None:
        check_key(key)
        self.kit = kit
        self.key = key

    def read(self, timeout: Seconds = UNSET) -> SharedLock:
        """A shared place: held alongside other readers, never beside a writer."""
        return SharedLock(self.kit, self.key, "read", 0, timeout)

    def write(self, timeout: Seconds = UNSET) -> SharedLock:
        """The exclusive place: no reader and no other writer while it is held."""
        return SharedLock(self.kit, self.key, "write", 1, timeout)

    def holders(self) -> list[Lease]:
        """The readers, or the writer, that hold the lock now."""
        full = namespaced(self.kit.namespace, self.key)
        return self.kit.backend.shared_holders(full, "read", 0)
