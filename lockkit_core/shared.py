"""Places of read-write locks and semaphores, held as leases like plain locks.

A place (a reader's, the writer's, or one of a semaphore's ``limit``) is acquired, waited for,
renewed by the watchdog, reported lost (``on_lost``, ``check()``, ``LockLost`` on leaving the
``with`` block), adopted by owner token and handed off by the very machinery of
:class:`~lockkit_core.lock.Lock`. What differs is only what the store is asked:
:class:`SharedStore` presents a backend's shared-place operations (``Backend.try_acquire_shared``
and friends, for one mode and limit) as the plain lock operations that machinery calls, and
:class:`SharedKit` is the kit a place's handle sees, with a table of holds of its own (a
thread re-entering a read re-enters its read, never somebody's write).

Order: every backend serves places first come, first served (FIFO). A reader that arrives
after a waiting writer queues behind it, so a stream of readers never starves a writer, and a
writer never starves the readers queued behind it either.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

from .backends.base import Backend, Capability, Grant, Lease, Waiter
from .config import UNSET
from .errors import LockNotOwned, LockTimeout, NotSupported
from .hold_table import Holds
from .lock import Lock

if TYPE_CHECKING:
    from .backends.aio import AsyncOps
    from .config import Seconds
    from .hold import Hold
    from .kit import LockKit

__all__ = ["MODES", "SharedKit", "SharedLock", "SharedStore"]

#: ``"read"`` and ``"write"`` places of a read-write lock, ``"slot"`` of a semaphore
MODES = ("read", "write", "slot")


class SharedStore(Backend):
    """``base``'s places of ``mode`` (and ``limit``, for a semaphore), shaped as plain lock
    operations on a key: what :mod:`lockkit_core.drivers` and :class:`~lockkit_core.hold.Hold`
    call. Waiting is the store's own (``Backend.shared_waiter``), first come, first served."""

    capabilities: ClassVar[Capability] = Capability.NONE  # set per instance: the base's

    def __init__(self, base: Backend, mode: str, limit: int) -> None:
        # Not Backend.__init__: the base parsed the URL and options already.
        self.url = base.url
        self.options = base.options
        self.base = base
        self.mode = mode
        self.limit = limit
        self.capabilities = base.capabilities  # type: ignore[misc]

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        return self.base.try_acquire_shared(key, owner, self.mode, self.limit, ttl)

    def release(self, key: str, owner: str) -> bool:
        return self.base.release_shared(key, owner, self.mode)

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        return self.base.extend_shared(key, owner, self.mode, ttl)

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        return self.base.adopt_shared(key, owner, self.mode, ttl)

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        return self.base.shared_waiter(key, owner, self.mode, self.limit)

    def queue_first(self) -> bool:
        return self.base.queue_first()

    def track(self, hold: Hold) -> None:
        self.base.track(hold)

    def aio(self) -> AsyncOps:
        raise NotSupported(
            "read-write locks and semaphores have no asyncio API yet (aacquire, async with); "
            "take them with the blocking API (in asyncio.to_thread from a coroutine)"
        )

    def list(self, prefix: str) -> list[Lease]:
        raise NotSupported("places are listed per lock: rwlock(key).holders(), .holders()")

    def info(self, key: str) -> Lease | None:
        holders = self.base.shared_holders(key, self.mode, self.limit)
        return holders[0] if holders else None

    def force_release(self, key: str) -> bool:
        raise NotSupported("places of read-write locks and semaphores are not force-released")

    def describe(self) -> str:
        return self.base.describe()


class SharedKit:
    """The kit a place's handle sees (:class:`~lockkit_core.handle.KitParts`): its kit's
    namespace, the shared operations of one mode as the backend, and their own holds."""

    def __init__(self, kit: LockKit, mode: str, limit: int) -> None:
        self.kit = kit
        self.namespace = kit.namespace
        self.backend: Backend = SharedStore(kit.backend, mode, limit)
        self.holds = Holds(self.backend)


class SharedLock(Lock):
    """A place of ``mode`` on ``key``: a :class:`~lockkit_core.lock.Lock` in everything but
    what it takes (``acquire``/``release``, ``with``, ``token``, ``owner``, ``check()``,
    ``extend()``, ``hand_off()``, ttl, renewal and ``on_lost``). Leaving ``with`` after
    ``timeout`` without a place raises :class:`LockTimeout`."""

    def __init__(
        self,
        parts: SharedKit,
        key: str,
        *,
        mode: str,
        limit: int,
        reentrant: bool,
        options: dict[str, Any],
    ) -> None:
        super().__init__(parts, key, reentrant=reentrant, **{**options, "fair": True})
        self.shared = parts
        self.mode = mode
        self.limit = limit

    def __repr__(self) -> str:
        state = "held" if self._view() is not None else "free"
        return f"<{type(self).__name__} {self.full_key!r} {self.mode} {state} token={self.token}>"

    def acquire(self, blocking: bool = True, timeout: Seconds = UNSET) -> bool:
        """Take a place (see :meth:`Lock.acquire`). A handle that does not re-enter holds
        one place at a time: release it before asking again."""
        if not self.reentrant and self._hold is not None and self._hold.pid == os.getpid():
            raise LockNotOwned(self.key, f"{self!r} already holds a place; release it first")
        return super().acquire(blocking, timeout)

    def _timed_out(self) -> LockTimeout:
        return LockTimeout(
            self.key,
            f"no {self.mode} place on {self.key!r} came free"
            + (f" within {self.timeout:g} s" if self.timeout else ""),
        )
