"""``Hold``: the record of one acquisition of one key on the store.

A ``Hold`` is what is actually held; ``Lock`` handles point at it. Every handle that re-enters
the same key in the same thread shares one hold, so the store is touched once per outermost
acquisition. The lease is tracked with the monotonic clock, measured from *before* the request
that obtained or extended it was sent, so ``is_lost()`` decides locally, without a round trip.

Who a hold belongs to decides when it has leaked (see :meth:`Hold.leak`):

* a reentrant hold taken by a blocking acquire belongs to its *thread* (like
  ``threading.RLock``): only that thread can release it, so once the thread has exited nobody
  can, and the hold has leaked (an asyncio acquisition belongs to its handle; see
  :mod:`lockkit_core.handle`);
* a non-reentrant hold belongs to its *acquisition* (like ``threading.Lock``): any thread may
  release it through the handle, so the thread that took it exiting is no leak;
* either way, once every handle that used the hold is garbage, nobody can release it.

A hold is weakly tied to its handles, so the watchdog renewing it never keeps them alive.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from . import lease, observe, process
from .backends.base import Backend, owner_hint
from .errors import LockLost

if TYPE_CHECKING:
    from .lock import Lock

__all__ = ["Hold", "inherited_message", "lost_message", "run_on_lost"]

log = logging.getLogger("lockkit")
#: makes "lost" reported once when a renewal and a release find it at the same time
_reporting = threading.Lock()


class Hold:
    """One acquisition of one key on the store."""

    __slots__ = (
        "active",
        "auto_renew",
        "backend",
        "count",
        "deadline",
        "full_key",
        "granted",
        "handles",
        "key",
        "labels",
        "lock",
        "lost_reason",
        "mark",
        "owner",
        "pid",
        "task",
        "thread",
        "token",
        "ttl",
    )

    def __init__(
        self,
        lock: Lock,
        backend: Backend,
        owner: str,
        token: int | None,
        deadline: float,
        task: asyncio.Task[Any] | None = None,
    ) -> None:
        # The handle whose on_lost callbacks apply, and every handle that re-entered it.
        self.lock = weakref.ref(lock)
        self.handles = [self.lock]
        self.backend = backend
        self.key = lock.key
        self.full_key = lock.full_key
        self.owner = owner
        self.token = token
        self.ttl = lock.ttl
        self.auto_renew = lock.auto_renew
        self.deadline = deadline
        self.count = 1
        # Who may re-enter it: the thread of a blocking acquisition (its process.thread_mark(),
        # held weakly: never its ident or Thread object, which later threads may get), the
        # task of an asyncio one. The thread too, for its name.
        self.task = task if lock.reentrant else None
        self.thread = threading.current_thread() if lock.reentrant and task is None else None
        self.mark = weakref.ref(process.thread_mark()) if self.thread is not None else None
        self.pid = process.pid()
        self.lost_reason: str | None = None
        self.active = True
        # For the hold duration metric: from the grant (as seen here) to release or loss.
        self.granted = time.monotonic()
        self.labels = lock.labels

    def is_lost(self, now: float | None = None) -> bool:
        """True once renewal failed or the lease's deadline passed."""
        if self.lost_reason is not None:
            return True
        return (time.monotonic() if now is None else now) >= self.deadline

    def extend(self, ttl: float, *, raise_on_loss: bool) -> bool:
        """Reset the lease on the store to ``ttl`` seconds; False (or LockLost) if it is gone."""
        sent = time.monotonic()
        if not self._may_extend(sent, raise_on_loss):
            return False
        return self._extended(
            self.backend.extend(self.full_key, self.owner, ttl), sent, ttl, raise_on_loss
        )

    async def aextend(self, ttl: float) -> None:
        """:meth:`extend` on the event loop; LockLost if the lease is gone."""
        sent = time.monotonic()
        self._may_extend(sent, True)
        done = await self.backend.aio().extend(self.full_key, self.owner, ttl)
        self._extended(done, sent, ttl, True)

    def _may_extend(self, sent: float, raise_on_loss: bool) -> bool:
        if self.is_lost(sent):
            # Once lost, always lost: the caller may already have been told so.
            self.mark_lost(self.lost_reason or "its lease ran out before it was renewed")
            if raise_on_loss:
                raise LockLost(self.key, lost_message(self.key, self))
            return False
        return True

    def _extended(self, done: bool, sent: float, ttl: float, raise_on_loss: bool) -> bool:
        """Record the store's answer to an extension sent at ``sent``."""
        if done:
            valid_until = sent + lease.validity(ttl)
            # A lease given to a hold that had none replaces its endless deadline.
            self.deadline = valid_until if self.ttl is None else max(self.deadline, valid_until)
            self.ttl = ttl
            return True
        self.mark_lost("the store no longer had it under our owner token when extending")
        if raise_on_loss:
            raise LockLost(self.key, lost_message(self.key, self))
        return False

    def release(self) -> None:
        """Free the key on the store; LockLost if the lease was already gone, reported to
        ``on_lost`` too unless the watchdog reported it first."""
        was_lost = self.lost_reason is not None or time.monotonic() >= self.deadline  # is_lost
        self.settle(self.backend.release(self.full_key, self.owner), was_lost=was_lost)

    async def arelease(self) -> None:
        """:meth:`release` on the event loop."""
        was_lost = self.is_lost()
        self.settle(await self.backend.aio().release(self.full_key, self.owner), was_lost=was_lost)

    def settle(self, released: bool, *, was_lost: bool) -> None:
        """Account for a release the store answered ``released`` (False: our owner token no
        longer held the key); ``was_lost``: the lease was lost before it was sent. Raises
        and reports as :meth:`release` (which sends it itself; a batch sends several)."""
        if was_lost or not released:
            self._report_lost(
                "its lease ran out before release"
                if was_lost
                else "the store no longer had it under our owner token at release",
                released=True,
            )
            raise LockLost(self.key, lost_message(self.key, self))
        observe.held(self.labels, self.granted)

    def mark_lost(self, reason: str) -> None:
        """Record the loss once, log it and run the handle's ``on_lost`` callbacks.

        A hold its owner has released is never reported lost: a renewal racing the release
        (its extension reaches the store after the release did) finds the key gone, and
        that is the release, not a loss. ``active`` is cleared before the release is sent,
        so an extension whose answer says "gone" always sees it cleared.
        """
        self._report_lost(reason, released=False)

    def _report_lost(self, reason: str, *, released: bool) -> None:
        """Record ``reason`` and run ``on_lost`` if nobody did yet; the release reports a loss
        it finds itself (``released``), a renewal only while the hold is active."""
        with _reporting:
            if self.lost_reason is not None or not (released or self.active):
                return
            self.lost_reason = reason
        observe.lost(self.labels, self.granted)
        observe.event(log, logging.WARNING, "lost", self.full_key, "lock %r lost: %s",
                      self.full_key, reason, owner=owner_hint(self.owner))  # fmt: skip
        lock = self.lock()
        if lock is not None:
            run_on_lost(lock)

    def leak(self) -> str | None:
        """Why nobody can release this hold any more (see the module docstring), or None."""
        if all(handle() is None for handle in self.handles):
            return "every handle on it was dropped without release()"
        if self.thread is not None and (
            self.mark is None or self.mark() is None or not self.thread.is_alive()
        ):
            return f"its thread {self.thread.name!r} exited without releasing it"
        return None


def run_on_lost(lock: Lock) -> None:
    """Call each of ``lock.on_lost`` with the lock; one that fails is logged, never raised
    (this runs on the watchdog's thread, or inside a release)."""
    for callback in lock.on_lost:
        try:
            callback(lock)
        except Exception:
            log.exception("on_lost callback %r failed for %r", callback, lock.full_key)


def lost_message(key: str, hold: Hold) -> str:
    """Why ``hold`` on ``key`` is no longer trusted."""
    reason = hold.lost_reason or "its lease ran out before it was renewed"
    return f"lock {key!r} was lost: {reason}; another owner may have held it since"


def inherited_message(key: str, hold: Hold) -> str:
    """Why a forked child may not use its parent's hold."""
    return (
        f"lock {key!r} was acquired by process {hold.pid} before a fork; "
        "a child never releases or renews its parent's locks"
    )
