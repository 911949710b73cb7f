"""``HandOver``: how a lease leaves or joins a :class:`~lockkit_core.lock.Lock` handle without
a round trip of its own (hand-off to another process, a batched store operation's grant or release).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from . import lease, process
from .acquire import dead_on_arrival_error
from .backends.base import Capability, Grant
from .config import check_ttl
from .errors import ConfigError, LockNotOwned, NotSupported
from .handle import Handle
from .hold import Hold

if TYPE_CHECKING:
    from .lock import Lock

__all__ = ["HandOver"]


class HandOver(Handle):
    """The hand-over operations of a lock handle: ``hand_off``, ``hold_granted``, ``detach``."""

    def hold_granted(self, grant: Grant, sent: float) -> None:
        """Hold, through this handle made with ``owner=``, the lease a batched store operation
        sent at ``sent`` (monotonic) granted that owner (``Backend.begin_run``): renewed,
        checked and released from now on as after :meth:`acquire`, with no round trip more."""
        owner = self._given_owner
        if owner is None or not grant.acquired or self._here() is not None:
            raise LockNotOwned(
                self.key, f"cannot hold {self.key!r}: no grant to this handle's owner= token"
            )
        valid_until = sent + lease.validity(self.ttl)
        now = time.monotonic()
        if self.ttl is not None and now >= valid_until:
            raise dead_on_arrival_error(self.key, self.ttl, now - sent, 1)
        hold = self.kit.holds.start(cast("Lock", self), owner, grant.token, valid_until)
        if self.reentrant:
            self._local.use = [hold, 1]
        else:
            self._hold = hold
        self._last = hold

    def detach(self) -> tuple[Hold, bool]:
        """Stop holding the lock here, without a round trip, for an operation that frees
        several keys in one store call (``Backend.end_run``); returns the hold and whether
        its lease was already lost. Pass the store's answer to ``hold.settle()``, which
        reports a loss as :meth:`release` does. Raises :class:`LockNotOwned` if this handle
        does not hold the lock, or holds it re-entered."""
        hold = self._here()
        if hold is None or hold.count != 1 or hold.pid != process.pid():
            raise LockNotOwned(self.key, f"cannot detach {self.key!r}: not held once here")
        was_lost = hold.is_lost()
        self._forget(hold)
        return hold, was_lost

    def hand_off(self, ttl: float | None = None) -> str:
        """Stop holding the lock here without freeing it, and return its owner token.

        The lease is extended to ``ttl`` seconds (default: the lock's ttl; a lock without a
        lease must be given one, since its adopter may never come) and no longer
        renewed by this process, so whoever gets the token (``kit.lock(key, owner=token)``,
        e.g. the worker that runs a queued task) can adopt it before it runs out. Raises
        :class:`LockLost` if the lease is already gone, :class:`LockNotOwned` if this
        handle does not hold the lock or holds it re-entered, :class:`NotSupported` on a
        store whose leases end with the process that took them (ZooKeeper sessions).
        """
        new_ttl = self._new_ttl(ttl, "hand_off")
        backend = self.kit.backend
        if Capability.HAND_OFF not in backend.capabilities:
            raise NotSupported(
                f"the {backend.url.scheme}:// backend cannot hand off {self.key!r}: its leases "
                "end with the session of the process that took them; release it instead"
            )
        hold = self._here()
        if hold is None or hold.count != 1:
            raise LockNotOwned(
                self.key,
                f"cannot hand off {self.key!r}: "
                + ("not held through this handle" if hold is None else "it is re-entered"),
            )
        self.check()
        hold.extend(new_ttl, raise_on_loss=True)
        self._forget(hold)
        return hold.owner

    def _forget(self, hold: Hold) -> None:
        """Stop holding ``hold`` here, telling the store nothing: the lease is now someone
        else's to free (a batched store call's, or the adopter's)."""
        holds = self.kit.holds
        with holds.mutex:
            if self.reentrant:
                # The thread's use, or the handle's asyncio one (an aacquire's hold).
                self._set_use(None, hold.task is not None)
            else:
                self._hold = None
            hold.count = 0
            # Cleared before the store hears of it (see Hold.mark_lost); the watchdog drops
            # inactive holds without a round trip.
            hold.active = False
            holds.drop(hold)
            if self._last is hold:
                self._last = None

    def _new_ttl(self, ttl: float | None, verb: str) -> float:
        """The lease ``extend``/``hand_off`` sets: ``ttl``, else the lock's own."""
        if ttl is not None:
            return check_ttl(ttl)
        if self.ttl is None:
            raise ConfigError(
                f"{verb}() of {self.key!r} needs a ttl: the lock was taken without a lease "
                f"(ttl=None), so it has none to renew; pass {verb}(ttl=seconds)"
            )
        return self.ttl
