"""``Hold``: the record of one acquisition of one key on the store.

A ``Hold`` is what is actually held; ``Lock`` handles point at it. Every handle that re-enters
the same key in the same thread shares one hold, so the store is touched once per outermost
acquisition. The lease is tracked with the monotonic clock, measured from *before* the request
that obtained or extended it was sent, so ``is_lost()`` decides locally, without a round trip.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from . import lease
from .backends.base import Backend
from .errors import LockLost

if TYPE_CHECKING:
    from .lock import Lock

__all__ = ["Hold", "inherited_message", "lost_message"]

log = logging.getLogger("lockkit")


class Hold:
    """One acquisition of one key on the store."""

    __slots__ = (
        "active",
        "auto_renew",
        "backend",
        "count",
        "deadline",
        "full_key",
        "key",
        "lock",
        "lost_reason",
        "owner",
        "pid",
        "thread",
        "token",
        "ttl",
    )

    def __init__(
        self, lock: Lock, backend: Backend, owner: str, token: int | None, deadline: float
    ) -> None:
        self.lock = lock  # the handle whose on_lost callbacks and settings apply
        self.backend = backend
        self.key = lock.key
        self.full_key = lock.full_key
        self.owner = owner
        self.token = token
        self.ttl = lock.ttl
        self.auto_renew = lock.auto_renew
        self.deadline = deadline
        self.count = 1
        self.thread = threading.get_ident()
        self.pid = os.getpid()
        self.lost_reason: str | None = None
        self.active = True

    def is_lost(self, now: float | None = None) -> bool:
        """True once renewal failed or the lease's deadline passed."""
        if self.lost_reason is not None:
            return True
        return (time.monotonic() if now is None else now) >= self.deadline

    def extend(self, ttl: float, *, raise_on_loss: bool) -> bool:
        """Reset the lease on the store to ``ttl`` seconds; False (or LockLost) if it is gone."""
        sent = time.monotonic()
        if self.is_lost(sent):
            # Once lost, always lost: the caller may already have been told so.
            self.mark_lost(self.lost_reason or "its lease ran out before it was renewed")
            if raise_on_loss:
                raise LockLost(self.key, lost_message(self.key, self))
            return False
        if self.backend.extend(self.full_key, self.owner, ttl):
            self.deadline = max(self.deadline, sent + lease.validity(ttl))
            self.ttl = ttl
            return True
        self.mark_lost("the store no longer had it under our owner token when extending")
        if raise_on_loss:
            raise LockLost(self.key, lost_message(self.key, self))
        return False

    def release(self) -> None:
        """Free the key on the store; LockLost if the lease was already gone."""
        was_lost = self.is_lost()
        released = self.backend.release(self.full_key, self.owner)
        if was_lost or not released:
            if self.lost_reason is None:
                self.lost_reason = (
                    "its lease ran out before release"
                    if was_lost
                    else "the store no longer had it under our owner token at release"
                )
            raise LockLost(self.key, lost_message(self.key, self))

    def mark_lost(self, reason: str) -> None:
        """Record the loss once, log it and run the handle's ``on_lost`` callbacks."""
        if self.lost_reason is None:
            self.lost_reason = reason
            log.warning("lock %s lost: %s", self.full_key, reason)
            self.lock._fire_lost()


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
