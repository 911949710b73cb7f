"""``Waiter``: the protocol of waiting until a key may be free; ``SleepWaiter``, its fallback."""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Grant

__all__ = ["SleepWaiter", "Waiter"]


class Waiter(ABC):
    """A registration to be woken when a key may have become free.

    The protocol, as the acquire loop drives it (``Backend.waiter()`` makes one):

    1. It is created *before* the attempt that precedes the first wait, so a release between
       that attempt and ``wait()`` is not missed.
    2. ``wait(timeout)`` returns within ``timeout`` seconds: ``None`` when the key may have
       become free (the caller then tries again), or a :class:`Grant` when a store that queues
       waiters handed the lock straight to this one; ``since`` is then a time before the
       hand-over happened, from which the lease is counted. That grant and its token come
       from the store's own answer, never from a notice alone: whoever may write to the
       notice's channel could forge one. A busy :class:`Grant` (the store's answer to an
       attempt made while waiting) has the caller wait again, without an attempt of its own.
    3. ``close(acquired, reachable=...)`` is called exactly once, whatever happened. A lock
       handed to a waiter that gave up (``acquired=False``) must be passed on, not kept. With
       ``reachable=False`` the store has just failed: make no round trip (the caller must not
       wait another socket timeout); whatever the registration left on the store must expire
       by itself within the backend's short notify bound. ``close`` must not keep the caller
       past its timeout: a store told of the departure may be told after ``close`` returns
       (redis:// does so from a background thread), since an owner token serves one
       acquisition and is never asked with again.
    """

    @abstractmethod
    def wait(self, timeout: float) -> Grant | None:
        """Return after ``timeout`` seconds at the latest, earlier if the key was released;
        a :class:`Grant` if the store handed the lock to this waiter."""

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        """Drop the registration (see the class docstring for ``acquired`` and ``reachable``)."""


class SleepWaiter(Waiter):
    """Fallback for stores that cannot notify: jittered exponential backoff, 0.5 ms to 50 ms."""

    def __init__(self, first: float = 0.0005, cap: float = 0.05) -> None:
        self._delay = first
        self._cap = cap

    def wait(self, timeout: float) -> Grant | None:
        delay = self.next_delay(timeout)
        if delay > 0:
            time.sleep(delay)
        return None

    def next_delay(self, timeout: float) -> float:
        """The next pause, at most ``timeout``; each is about twice the last, up to the cap."""
        delay = min(timeout, self._delay * random.uniform(0.5, 1.5))
        self._delay = min(self._cap, self._delay * 2)
        return max(0.0, delay)
