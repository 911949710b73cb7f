"""``Holds``: a kit's table of live holds, the one place a ``Lock`` learns what it may re-enter.

A kit owns one; its ``Lock`` handles reach it as ``kit.holds`` and never touch the kit's
insides. Reentrant holds are listed by full key (a thread re-entering a key shares its hold);
a non-reentrant hold belongs to its handle and is never listed. :meth:`Holds.start` also hands
each new hold to the store (``Backend.track``) and to the watchdog.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .backends.base import Backend
from .hold import Hold
from .watchdog import watch

if TYPE_CHECKING:
    from .lock import Lock

__all__ = ["Holds"]


class Holds:
    """The reentrant holds of one kit, by full key, and the mutex that guards them.

    Readers may look without the mutex (:meth:`get`: the common "not re-entered" answer is
    decided lock-free); anything that acts on what it read takes :attr:`mutex` first and reads
    again under it.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        #: held while a handle decides on, counts, or drops a listed hold
        self.mutex = threading.Lock()
        self._by_key: dict[str, Hold] = {}

    def get(self, full_key: str) -> Hold | None:
        """The reentrant hold on ``full_key``, if one is listed."""
        return self._by_key.get(full_key)

    def start(self, lock: Lock, owner: str, token: int | None, valid_until: float) -> Hold:
        """A new hold for ``lock``'s acquisition by ``owner``: listed if reentrant, tracked by
        the store, renewed or watched by the watchdog."""
        hold = Hold(lock, self.backend, owner, token, valid_until)
        if lock.reentrant:
            with self.mutex:
                self._by_key[hold.full_key] = hold
        self.backend.track(hold)
        watch(hold)
        return hold

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
