"""A blocking caller queued on one key: its node watches only its predecessor (no herd).

It sets two watches on the node just ahead of it, in one round trip: a child watch, which on an
ephemeral node (it has no children) fires only when the node is deleted, and a data watch, which
fires when its data changes. A lock node's data changes only when it claims the lock or renews
it (see ``backend.py``), so the data watch says "the node ahead of us holds the lock now":
nobody can come before it any more, and its deletion makes us first, with no request to ask.
Neither event costs a request: the child watch stays set when the data watch fires, so the
holder's claim never wakes the caller's thread and can never hide the holder's release.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base import Grant, Waiter
from .session import Steps

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

__all__ = ["ZooKeeperWaiter"]


class ZooKeeperWaiter(Waiter):
    """Registered before the first attempt: ``try_acquire`` then keeps this owner's node in
    the queue (instead of removing it when busy) and watches the node just ahead of it,
    whose deletion wakes :meth:`wait`. Costs no round trip of its own."""

    def __init__(self, backend: ZooKeeperBackend, key: str, owner: str) -> None:
        self._backend = backend
        self.key = key
        self.owner = owner
        self._cond = threading.Condition()
        self._go = False  # something for the acquire loop to look at
        self._target: str | None = None  # the node ahead of us, which we watch
        self._holds = False  # ... and it holds the lock: its deletion makes us first
        self._head_gone = False
        self._term_ms = 0  # the lease the node ahead holds or will claim
        self._claimed_at: float | None = None  # when its data changed (a claim or renewal)
        self._due: float | None = None  # when that lease runs out unless renewed
        #: also told when there is something to look at (an asyncio waiter's loop)
        self.bell: Callable[[], None] = lambda: None
        backend._queued[(key, owner)] = self

    def watching(self, path: str, holds: bool) -> Callable[[Any], None]:
        """The watch callback for ``path``, the node just ahead of us; ``holds`` if it is the
        lock's holder. Set before the requests that set the watches are sent."""
        with self._cond:
            self._target, self._holds, self._head_gone = path, holds, False
            self._term_ms, self._claimed_at, self._due = 0, None, None
        return self._wake

    def saw(self, path: str, term_ms: int) -> None:
        """The lease the node ahead of us holds or will claim, as read with the watches."""
        with self._cond:
            if path == self._target:
                self._term_ms = term_ms
                if self._claimed_at is not None and term_ms:
                    self._due = self._claimed_at + term_ms / 1000.0
                    self._notify()

    def head_gone(self) -> bool:
        """True once the holder's node we watched (we were next) was deleted."""
        with self._cond:
            gone, self._head_gone = self._head_gone, False
            return gone

    def _wake(self, event: Any) -> None:
        # kazoo's event thread: only note what happened. Events of a node we no longer
        # watch are stale (the acquire loop has looked again since), and a deletion fires
        # both watches: the second finds the target cleared.
        with self._cond:
            if event.path != self._target:
                return
            if event.type == "CHANGED":
                # The node ahead claimed the lock or renewed it: if it stops renewing, its
                # lease runs out one term from now at the latest (its stamp is older).
                self._holds = True
                self._claimed_at = time.monotonic()
                if self._term_ms:
                    self._due = self._claimed_at + self._term_ms / 1000.0
                    self._notify()
                return
            if event.type == "DELETED":
                self._head_gone = self._holds
                self._target = None
            self._go = True
            self._notify()

    def _notify(self) -> None:
        self._cond.notify()
        self.bell()

    def pause(self, end: float) -> float | None:
        """How long to sleep before looking again, or None: stop waiting (something
        happened, or ``end`` came). Called with the condition's lock held."""
        if not self._go:
            until = end if self._due is None else min(end, self._due)
            left = until - time.monotonic()
            if left > 0:
                return left
        self._go = False
        if self._due is not None and self._due <= time.monotonic():
            self._due = None  # the next attempt reads the lease afresh
        return None

    def look(self, end: float) -> float | None:
        """:meth:`pause`, taking the lock (for a waiter that sleeps elsewhere)."""
        with self._cond:
            return self.pause(end)

    def wait(self, timeout: float) -> Grant | None:
        end = time.monotonic() + timeout
        with self._cond:
            while (left := self.pause(end)) is not None:
                self._cond.wait(left)
        return None  # the next attempt claims the lock if we are first now

    def leaving(self, acquired: bool, reachable: bool) -> Steps[None]:
        """:meth:`close`'s requests: drop our node unless we hold the lock with it."""
        self._backend._queued.pop((self.key, self.owner), None)
        if not acquired:
            yield from self._backend.leave(self.key, self.owner, reachable=reachable)

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self._backend.session.run(self.leaving(acquired, reachable))
