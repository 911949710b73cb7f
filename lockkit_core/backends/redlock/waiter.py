"""A blocking caller waiting for a Redlock key: queued on one node, woken by its hand-over."""

from __future__ import annotations

import random
import threading
import zlib
from typing import TYPE_CHECKING

from ..base import Grant, Waiter
from ..redis.waiter import READY_WITHIN, RedisWaiter

if TYPE_CHECKING:
    from .backend import RedlockBackend

__all__ = ["RedlockWaiter"]


class RedlockWaiter(Waiter):
    """Queued on the key's *home* node only: a node picked by the key's hash, the same in
    every process, so all waiters for a key line up in one order. Were they queued on every
    node, each node would hand its lock to its own head at a release, the heads would differ
    (requests reach the nodes in different orders), and no one would hold a majority. The
    home node's release hands its lock to its head and tells that waiter's process on
    pub/sub (as on redis://); the notice only wakes the caller, whose next attempt asks
    every node. While the home node does not answer, the next node is home.

    ``held[i]`` is node ``i``'s last answer to this caller's attempts: True when it granted.
    """

    def __init__(self, backend: RedlockBackend, key: str, owner: str) -> None:
        self._backend = backend
        self.key = key
        self.owner = owner
        self._event = threading.Event()
        self.held = [False] * len(backend.nodes)
        self.home = zlib.crc32(key.encode("utf-8", "surrogatepass")) % len(backend.nodes)
        self._queued = self._queue_on(self.home)
        self._backoff = 0.002

    def _queue_on(self, home: int) -> RedisWaiter:
        queued = RedisWaiter(self._backend.nodes[home], self.key, self.owner, True, self._event)
        # The attempt that follows must come after the subscription, or a hand-over in
        # between would go unnoticed until the holder's lease ran out.
        queued.listening(READY_WITHIN)
        self._event.clear()  # the listener's "subscribed" wake-up is no news
        return queued

    def home_failed(self) -> None:
        """The home node did not answer: queue on the next one (the old queue is left from
        the background once it answers again)."""
        self._queued.close(False, reachable=False)
        self.home = (self.home + 1) % len(self._backend.nodes)
        self._queued = self._queue_on(self.home)

    def wait(self, timeout: float) -> Grant | None:
        if not self._queued.listening():
            # no notice can reach us now: poll, with a bounded delay
            timeout = min(timeout, self._backoff * random.uniform(0.5, 1.5))
            self._backoff = min(0.1, self._backoff * 2)
        self._event.wait(timeout)
        self._event.clear()
        return None

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self._backend.forget(self)
        # a place still queued, or a lock the home node handed over after our last
        # attempt, is left and passed on; a lock counted in our majority is kept
        self._queued.close(acquired and self.held[self.home], reachable=reachable)
