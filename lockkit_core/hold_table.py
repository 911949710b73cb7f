"""``Holds``: a kit's table of live holds, the one place a ``Lock`` learns what it may re-enter.

A kit owns one; its ``Lock`` handles reach it as ``kit.holds`` and never touch the kit's
insides. Reentrant holds are listed by full key (a thread re-entering a key shares its hold);
a non-reentrant hold belongs to its handle and is never listed. :meth:`Holds.start` also hands
each new hold to the store (``Backend.track``) and to the watchdog.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any

from . import process
from .backends.base import Backend
from .hold import Hold
from .watchdog import watch

if TYPE_CHECKING:
    from .lock import Lock

__all__ = ["Holds"]

log = logging.getLogger("lockkit")


class Holds:
    """The reentrant holds of one kit, by full key, and the mutex that guards them.

    Readers may look without the mutex (:meth:`get`: the common "not re-entered" answer is
    decided lock-free); anything that acts on what it read takes :attr:`mutex` first and reads
    again under it.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        # A store's track() is called only if it has one (most keep nothing per hold).
        self._track = None if type(backend).track is Backend.track else backend.track
        #: held while a handle decides on, counts, or drops a listed hold
        self.mutex = threading.Lock()
        self._by_key: dict[str, Hold] = {}

    def get(self, full_key: str) -> Hold | None:
        """The reentrant hold on ``full_key``, if one is listed."""
        return self._by_key.get(full_key)

    def start(
        self,
        lock: Lock,
        owner: str,
        token: int | None,
        valid_until: float,
        task: asyncio.Task[Any] | None = None,
    ) -> Hold:
        """A new hold for ``lock``'s acquisition by ``owner`` (made by ``task`` for an asyncio
        one): listed if reentrant, tracked by the store, renewed or watched by the watchdog."""
        hold = Hold(lock, self.backend, owner, token, valid_until, task)
        if lock.reentrant:
            with self.mutex:
                self._by_key[hold.full_key] = hold
        if self._track is not None:
            self._track(hold)
        watch(hold)
        if hold.ttl is None:
            self.tie(hold, lock)
        return hold

    def tie(self, hold: Hold, lock: Lock) -> None:
        """A hold without a lease is never watched (nothing to renew) and never runs out:
        once every handle on it is dropped, free the key then, with the watchdog's
        ResourceWarning, rather than hold it for the life of the process."""
        if hold.ttl is None:
            weakref.finalize(lock, self._dropped, hold)

    def _dropped(self, hold: Hold) -> None:
        if not hold.active or hold.pid != process.pid():
            return
        why = hold.leak()
        if why is None or not why.startswith("every handle"):
            return  # another handle re-entered it and may still release it
        with self.mutex:
            if not hold.active:
                return
            hold.active = False
            self.drop(hold)
        warnings.warn(
            f"lockkit: lock {hold.key!r} ({hold.full_key}) leaked: {why}. It has no lease, "
            "so it is released now. Release what you acquire, e.g. with "
            "'with kit.lock(...):'",
            ResourceWarning,
            stacklevel=2,
        )
        try:
            self.backend.release(hold.full_key, hold.owner)
        except Exception as exc:  # a finalizer must not raise (the kit may be closed)
            log.error("lock %r leaked and could not be released: %s", hold.full_key, exc)

    def drop(self, hold: Hold) -> None:
        """Unlist ``hold`` if it is still the one listed for its key; call with :attr:`mutex`
        held."""
        if self._by_key.get(hold.full_key) is hold:
            del self._by_key[hold.full_key]

    def after_fork_in_child(self) -> None:
        """Forget the parent's holds (a child never renews or releases them) and its mutex,
        which another thread of the parent may have held at the fork."""
        self.mutex = threading.Lock()
        self._by_key = {}
