"""``RWLock``: readers share a key, a writer has it alone, in arrival order.

``with kit.rwlock("catalog").read(timeout=5): ...`` / ``.write(timeout=5)``. Places are
served first come, first served: a reader that comes after a waiting writer waits behind it,
so writers are not starved, and readers queued behind a writer go in together after it. Each
place is a lease like a plain lock's (ttl, renewal, ``on_lost``, owner tokens; see
:mod:`lockkit_core.shared`). Reads and writes re-enter per thread like ``threading.RLock``;
a thread holding the write that asks for a read waits on itself (release the write first).
Needs a backend with ``Capability.SHARED``; elsewhere ``kit.rwlock()`` raises ``NotSupported``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .backends.base import Lease
from .config import UNSET, Seconds
from .keys import check_key, namespaced
from .lock_options import place_options
from .shared import SharedLock

if TYPE_CHECKING:
    from .kit import LockKit

__all__ = ["RWLock"]


class RWLock:
    """A read-write lock on one key; each ``read()``/``write()`` is a new handle with the
    lease settings given to ``kit.rwlock()``."""

    def __init__(self, kit: LockKit, key: str, options: dict[str, Any]) -> None:
        check_key(key)
        self.kit = kit
        self.key = key
        self._options = options

    def read(self, timeout: Seconds = UNSET, *, owner: str | None = None) -> SharedLock:
        """A shared place: held alongside other readers, never beside a writer.
        ``owner`` adopts a place taken elsewhere, as ``kit.lock(key, owner=...)`` does."""
        return self._place("read", timeout, owner)

    def write(self, timeout: Seconds = UNSET, *, owner: str | None = None) -> SharedLock:
        """The exclusive place: no reader and no other writer while it is held."""
        return self._place("write", timeout, owner)

    def _place(self, mode: str, timeout: Seconds, owner: str | None) -> SharedLock:
        options = place_options(self._options, timeout, owner)
        parts = self.kit.shared_parts(mode, 0)
        return SharedLock(parts, self.key, mode=mode, limit=0, reentrant=True, options=options)

    def holders(self) -> list[Lease]:
        """The readers, or the writer, that hold the lock now."""
        full = namespaced(self.kit.namespace, self.key)
        return self.kit.backend.shared_holders(full, "read", 0)
