"""A blocking caller queued on one key: its node watches only its predecessor (no herd)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base import Grant, Waiter

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

__all__ = ["ZooKeeperWaiter"]


class ZooKeeperWaiter(Waiter):
    """Registered before the first attempt: ``try_acquire`` then keeps this owner's node in
    the queue (instead of removing it when busy) and sets a watch on the node just ahead of
    it, whose change wakes :meth:`wait`. Costs no round trip of its own."""

    def __init__(self, backend: ZooKeeperBackend, key: str, owner: str) -> None:
        self._backend = backend
        self.key = key
        self.owner = owner
        self._event = threading.Event()
        self._head: str | None = None  # the holder's node, when it is the one we watch
        self._head_gone = False
        backend._queued[(key, owner)] = self

    def watching(self, head: str | None) -> Callable[[Any], None]:
        """The watch callback for the node ahead of us; ``head`` if that node holds the lock."""
        self._head, self._head_gone = head, False
        return self._wake

    def head_gone(self) -> bool:
        """True once the holder's node we watched (we were next) was deleted."""
        gone, self._head_gone = self._head_gone, False
        return gone

    def _wake(self, event: Any) -> None:
        # kazoo's event thread: only note what happened.
        if self._head is not None and event.path == self._head and event.type == "DELETED":
            self._head_gone = True
        self._event.set()

    def wait(self, timeout: float) -> Grant | None:
        self._event.wait(timeout)
        self._event.clear()
        return None  # the next attempt claims the lock if we are first now

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self._backend._queued.pop((self.key, self.owner), None)
        if not acquired:
            self._backend.leave(self.key, self.owner, reachable=reachable)
