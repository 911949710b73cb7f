"""A blocking caller waiting for a Redlock key: queued on one node, woken by its hand-over."""

from __future__ import annotations

import random
import threading
from typing import TYPE_CHECKING

from ..base import Grant, Waiter
from ..redis.waiter import READY_WITHIN, RedisWaiter

if TYPE_CHECKING:
    from .backend import RedlockBackend

__all__ = ["RedlockWaiter"]

#: the first pause (seconds) of a waiter that must poll; each is about twice the last, to 0.1 s
FIRST_POLL = 0.002


class RedlockWaiter(Waiter):
    """Queued on the key's *home* node only: a node picked by the key's hash, the same in
    every process, so all waiters for a key line up in one order (``home_of``). Were they
    queued on every node, each node would hand its lock to its own head at a release, the
    heads would differ (requests reach the nodes in different orders), and no one would
    hold a majority. The home node's release hands its lock to its head and tells that
    waiter's process on pub/sub (as on redis://); the notice only wakes the caller, whose
    next attempt asks every node. While the home node does not answer, the next node is
    home: waiters that notice the failure at different times may line up on two nodes for
    a while, which costs split votes and retries, never exclusion.

    ``held[i]`` is node ``i``'s last answer to this caller's attempts: True when it granted.
    """

    def __init__(self, backend: RedlockBackend, key: str, owner: str) -> None:
        self._backend = backend
        self.key = key
        self.owner = owner
        self._event = threading.Event()
        self.held = [False] * len(backend.nodes)
        self.home = backend.home_of(key)
        self._queued = self._queue_on(self.home)
        self._backoff = FIRST_POLL
        self._moved = False  # queued on a new home node: the next attempt joins its queue

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
        self.home = self._backend.home_of(self.key)
        self._queued = self._queue_on(self.home)
        self._moved = True

    def wait(self, timeout: float) -> Grant | None:
        if self._moved:
            # the attempt that found the old home down was not queued on the new one yet:
            # ask again at once (no notice would come; the busy answer may say a whole ttl)
            self._moved = False
            return None
        if self.held[self.home] or not self._queued.listening():
            # Holding the home node's lock (our turn) but not a majority, no node will tell
            # us when the others free up; nor can a notice reach us while the listener is
            # down. Poll, with a bounded delay.
            timeout = min(timeout, self._backoff * random.uniform(0.5, 1.5))
            self._backoff = min(0.1, self._backoff * 2)
        else:
            self._backoff = FIRST_POLL
        self._event.wait(timeout)
        self._event.clear()
        return None

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self._backend.forget(self)
        # a place still queued, or a lock the home node handed over after our last
        # attempt, is left and passed on; a lock counted in our majority is kept
        self._queued.close(acquired and self.held[self.home], reachable=reachable)
