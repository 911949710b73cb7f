"""``Handle``: what a :class:`~lockkit_core.lock.Lock` handle holds and who may re-enter it.

Blocking acquisitions of a reentrant lock belong to their thread (like ``threading.RLock``):
each thread keeps its ``[hold, depth]`` in a thread-local of the handle. An asyncio
acquisition (``aacquire``) is re-entered by the task that made it, but belongs to the handle:
``asyncio.wait_for`` (before Python 3.12) and ``create_task`` run a coroutine in a task of its
own, so the task that releases is often not the one that acquired; and a task ending is no
sign of a leak, so only the handle being dropped is. A non-reentrant hold belongs to its
acquisition. The public API (blocking and asyncio) is :class:`~lockkit_core.lock.Lock`'s.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, cast

from . import process
from .errors import LockLost, LockNotOwned
from .hold import Hold, inherited_message, lost_message
from .keys import namespaced
from .observe import Labels

if TYPE_CHECKING:
    from .backends.base import Backend
    from .hold_table import Holds
    from .lock import Lock

__all__ = ["Handle", "KitParts", "OnLost"]

OnLost = Callable[["Lock"], object]


class KitParts(Protocol):
    """All a handle uses of its kit: a :class:`~lockkit_core.LockKit`, or the view of a
    kit's read-write locks and semaphores (:class:`~lockkit_core.shared.SharedKit`)."""

    backend: Backend
    namespace: str
    holds: Holds


class Handle:
    """The state of a handle on one key and its reentrancy bookkeeping."""

    def __init__(
        self,
        kit: KitParts,
        key: str,
        *,
        ttl: float | None,
        timeout: float | None,
        auto_renew: bool,
        reentrant: bool,
        fair: bool,
        on_lost: Iterable[OnLost],
        owner: str | None,
        labels: Labels,
    ) -> None:
        self.kit = kit
        self.key = key
        self.full_key = namespaced(kit.namespace, key)
        self.ttl = ttl
        self.timeout = timeout
        self.auto_renew = auto_renew
        self.reentrant = reentrant
        self.fair = fair
        self.on_lost: list[OnLost] = list(on_lost)
        self._given_owner = owner
        self.labels = labels  # the attributes of its metrics (lockkit_core.observe)
        # Reentrant: this thread's [hold, depth], in a thread-local so that it dies with its
        # thread and a later thread reusing the ident starts empty; and the handle's asyncio
        # acquisition's. Non-reentrant: the hold of the current acquisition, whichever thread
        # or task took it (no thread-local: making one costs more than the rest of a handle).
        if reentrant:
            self._local = threading.local()
        self._async_use: list[Any] | None = None
        self._hold: Hold | None = None
        self._last: Hold | None = None  # what other threads and callbacks see

    def _here(self) -> Hold | None:
        if not self.reentrant:
            return self._hold
        use = self._use(False) or self._async_use
        return use[0] if use is not None else None

    def _use(self, asynchronous: bool) -> list[Any] | None:
        """The ``[hold, depth]`` of this thread, or of the handle's asyncio acquisition."""
        if asynchronous:
            return self._async_use
        use: list[Any] | None = getattr(self._local, "use", None)
        return use

    def _set_use(self, use: list[Any] | None, asynchronous: bool) -> None:
        if asynchronous:
            self._async_use = use
        else:
            self._local.use = use

    def _view(self) -> Hold | None:
        return self._here() or self._last

    def _took(self, hold: Hold) -> None:
        if self.reentrant:
            self._set_use([hold, 1], hold.task is not None)
        else:
            self._hold = hold
        self._last = hold

    def _reenter(self, task: asyncio.Task[Any] | None = None) -> bool:
        """Re-enter a hold of this thread (or of ``task``, for ``aacquire``) on the key."""
        holds = self.kit.holds
        hold = holds.get(self.full_key)
        if hold is None or (
            (hold.mark is None or hold.mark() is not process.thread_mark())
            if task is None
            else hold.task is not task
        ):
            return False  # the common case, decided without the kit's lock
        use = self._use(task is not None)
        with holds.mutex:
            if (
                holds.get(self.full_key) is not hold
                or hold.pid != process.pid()
                or not hold.active
                or (use is not None and use[0] is not hold)
                or (self._given_owner is not None and self._given_owner != hold.owner)
                or hold.leak() is not None  # leaked: expiring, and told so, not to be reused
            ):
                return False
            if hold.is_lost():
                raise LockLost(self.key, lost_message(self.key, hold))
            hold.count += 1
            if use is None:
                use = [hold, 0]
                self._set_use(use, task is not None)
                hold.handles.append(weakref.ref(cast("Lock", self)))
                self.kit.holds.tie(hold, cast("Lock", self))
            use[1] += 1
            return True

    def _let_go(self) -> Hold | str | None:
        """Let go of one level: the hold to free on the store once the outermost level ends,
        the given owner token to release directly, or None while re-entered."""
        holds = self.kit.holds
        reentrant = self.reentrant
        hold: Hold | None
        if reentrant:
            use: list[Any] | None = getattr(self._local, "use", None) or self._async_use
            hold = None if use is None else use[0]
        else:
            hold = self._hold
        if hold is None:
            if self._given_owner is not None:
                return self._given_owner
            how = (
                "this thread does not hold it through this handle (blocking acquisitions of "
                "reentrant locks are owned per thread; use reentrant=False to release from "
                "another thread)"
                if self.reentrant
                else "this handle does not hold it"
            )
            raise LockNotOwned(self.key, f"cannot release {self.key!r}: {how}")
        if hold.pid != process.pid():
            raise LockNotOwned(self.key, inherited_message(self.key, hold))
        with holds.mutex:
            if reentrant:
                # This thread's use, else the handle's asyncio one (read again under the
                # mutex: another task may have let go of it meanwhile).
                use = getattr(self._local, "use", None)
                asynchronous = use is None
                if asynchronous:
                    use = self._async_use
                assert use is not None
                use[1] -= 1
                if use[1] == 0:
                    if asynchronous:
                        self._async_use = None
                    else:
                        self._local.use = None
            elif self._hold is hold:
                self._hold = None
            else:  # another thread released it first
                raise LockNotOwned(self.key, f"cannot release {self.key!r}: already released")
            hold.count -= 1
            if hold.count > 0:
                return None
            # Cleared before the store hears of it: see Hold.mark_lost.
            hold.active = False
            holds.drop(hold)
            if self._last is hold:
                self._last = None
        return hold

    def check(self) -> None:
        """Raise :class:`LockLost` if the lease was lost; decided locally, never blocks."""
        hold = self._view()
        if hold is None:
            raise LockNotOwned(self.key, f"lock {self.key!r} is not held by this handle")
        if hold.pid != process.pid():
            raise LockNotOwned(self.key, inherited_message(self.key, hold))
        if hold.is_lost():
            raise LockLost(self.key, lost_message(self.key, hold))
