"""A blocking caller queued on one key, woken by the notice that hands it the lock."""

from __future__ import annotations

import random
import threading
from typing import TYPE_CHECKING

from ...errors import BackendError
from ..base import Grant, Waiter
from .scripts import owner_id

if TYPE_CHECKING:
    from .backend import RedisBackend

__all__ = ["RedisWaiter"]


class RedisWaiter(Waiter):
    """Queued for one key: woken by the notice that hands it the lock, or that frees it."""

    def __init__(self, backend: RedisBackend, key: str, owner: str) -> None:
        self._backend = backend
        self._listener = backend._listener
        self.key = key
        self.owner = owner
        self.id = owner_id(owner)  # what the server and the notices know it by
        self.event = threading.Event()
        self.handed: int | None = None
        self.queued_at: float | None = None  # send time of the first attempt that queued us
        self.entry_until = 0.0  # (monotonic) when our queue entry expires on the server
        self._backoff = 0.002
        backend._queued[(key, owner)] = self
        self._listener.register(self)
        # The attempt that follows must come after the subscription, or a hand-over in
        # between would go unnoticed until the holder's lease ran out. Until the listener
        # is subscribed, wait() falls back to short backoff, so this wait stays short.
        self._listener.wait_ready(0.05)

    def wait(self, timeout: float) -> Grant | None:
        if not self._listener.healthy:
            # No notice can arrive while the listener is down: poll, with a bounded delay.
            timeout = min(timeout, self._backoff * random.uniform(0.5, 1.5))
            self._backoff = min(0.1, self._backoff * 2)
        self.event.wait(timeout)
        self.event.clear()
        token, self.handed = self.handed, None
        if token is None or self.queued_at is None:
            return None
        return Grant(True, self._backend.saw_token(token), since=self.queued_at)

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        queued = not acquired and self.queued_at is not None
        # A queued waiter that leaves without a word (the store just failed; another round
        # trip would cost the caller another socket timeout) stays known to the listener,
        # which passes on a lock handed to it; its entry on the server expires by itself.
        self._listener.unregister(self, abandoned=queued and not reachable)
        self._backend._queued.pop((self.key, self.owner), None)
        if queued and reachable:
            try:
                self._backend.leave(self.key, self.owner)
            except BackendError:
                self._listener.abandon(self)
                raise
