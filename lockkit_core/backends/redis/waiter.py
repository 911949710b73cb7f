"""A blocking caller queued on one key, woken by the notice that hands it the lock."""

from __future__ import annotations

import random
import threading
import time
from typing import TYPE_CHECKING

from ..base import Grant, Waiter
from .scripts import owner_id

if TYPE_CHECKING:
    from .backend import RedisBackend

__all__ = ["RedisWaiter"]


class RedisWaiter(Waiter):
    """Queued for one key: woken by the notice that hands it the lock, or that frees it."""

    def __init__(self, backend: RedisBackend, key: str, owner: str, fair: bool) -> None:
        self._backend = backend
        self._listener = backend._listener
        self.key = key
        self.owner = owner
        self.fair = fair  # False: others may take the lock past us, boundedly (lua/lock.lua)
        #: (monotonic) when the store said to ask again: a head that may be passed over is
        #: not told of every release, only when to ask (lua/lock.lua, bounded barging)
        self.ask_at: float | None = None
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
        until = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            # told when to ask again ('<id>|@<ms>', or a busy answer's): no sooner, no later
            ask_at = self.ask_at
            if self.handed is None and ask_at is not None and ask_at <= now:
                self.ask_at = None
                return None
            self.event.wait(max(0.0, min(until, ask_at or until) - now))
            self.event.clear()
            token, self.handed = self.handed, None
            if token is not None and self.queued_at is not None:
                return Grant(True, self._backend.saw_token(token), since=self.queued_at)
            if self.ask_at is None or self.ask_at == ask_at or time.monotonic() >= until:
                return None  # woken to ask, or our time is up

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self._backend._queued.pop((self.key, self.owner), None)
        self._listener.unregister(self)
        if not acquired and self.queued_at is not None:
            # Its time is up, or the store just failed: either way no round trip now (it
            # would be spent past the caller's timeout). The queue is left in the background
            # once the store answers, which also passes on a lock handed to it meanwhile.
            self._backend.leaver.leave(self.key, self.owner, self.entry_until)
