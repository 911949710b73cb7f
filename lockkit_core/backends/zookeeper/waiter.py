"""A blocking caller queued on one key: its node watches only its predecessor (no herd)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..base import Grant, Waiter

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

__all__ = ["ZooKeeperWaiter"]


class ZooKeeperWaiter(Waiter):
    """Registered before the first attempt: ``try_acquire`` then keeps this owner's node in
    the queue (instead of removing it when busy) and sets a watch on the node just ahead of
    it, whose removal wakes :meth:`wait`. Costs no round trip of its own."""

    def __init__(self, backend: ZooKeeperBackend, key: str, owner: str) -> None:
        self._backend = backend
        self.key = key
        self.owner = owner
        self._event = threading.Event()
        backend._queued[(key, owner)] = self

    def wake(self, event: Any = None) -> None:
        """kazoo's watch callback (on its event thread): the node ahead changed."""
        self._event.set()

    def wait(self, timeout: float) -> Grant | None:
        self._event.wait(timeout)
        self._event.clear()
        return None  # the next attempt claims the lock if we are first now

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self._backend._queued.pop((self.key, self.owner), None)
        if not acquired:
            self._backend.leave(self.key, self.owner, reachable=reachable)
