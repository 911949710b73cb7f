"""``SharedOps``: a backend's read-write lock and semaphore operations (``Capability.SHARED``).

A place is a lease like a lock's, taken by the same acquire loop, watchdog and release
(:mod:`lockkit_core.shared` presents these as the plain operations). ``mode`` is ``"read"``
(shared with other readers) or ``"write"`` (exclusive) of a read-write lock, or ``"slot"``: one
of ``limit`` places of a semaphore. Places are served first come, first served: an attempt by an
owner with a waiter (``shared_waiter``) keeps its place in the queue; an attempt without one only
looks, and never gets ahead of a queued owner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import NotSupported

if TYPE_CHECKING:
    from ..url import LockURL
    from .base import Grant, Lease
    from .waiter import Waiter

__all__ = ["SharedOps"]


class SharedOps:
    """The shared-place operations :class:`~lockkit_core.backends.base.Backend` inherits:
    each raises :class:`NotSupported` unless a backend with ``Capability.SHARED`` overrides it."""

    url: LockURL

    def try_acquire_shared(self, key: str, owner: str, mode: str, limit: int, ttl: float) -> Grant:
        """Take a place of ``mode`` on ``key`` for ``owner`` for ``ttl`` seconds if one is free
        to it now (as ``Backend.try_acquire``: an owner that holds one already has it renewed)."""
        raise self._no_shared()

    def release_shared(self, key: str, owner: str, mode: str) -> bool:
        """Give up ``owner``'s place on ``key``; False if it no longer had one."""
        raise self._no_shared()

    def extend_shared(self, key: str, owner: str, mode: str, ttl: float) -> bool:
        """Reset the lease of ``owner``'s place on ``key`` to ``ttl`` seconds if it has one."""
        raise self._no_shared()

    def adopt_shared(self, key: str, owner: str, mode: str, ttl: float) -> Grant:
        """Take over ``owner``'s place (as ``Backend.adopt``): renewed, with its token."""
        raise self._no_shared()

    def shared_waiter(self, key: str, owner: str, mode: str, limit: int) -> Waiter:
        """Queue ``owner`` for a place and be woken when it may have one (see ``Waiter``)."""
        raise self._no_shared()

    def shared_holders(self, key: str, mode: str, limit: int) -> list[Lease]:
        """Who holds places on ``key`` now, in arrival order: the readers or the writer of a
        read-write lock (``mode`` ``"read"`` or ``"write"``), or the first ``limit`` of a
        semaphore (``"slot"``)."""
        raise self._no_shared()

    def _no_shared(self) -> NotSupported:
        return NotSupported(
            f"the {self.url.scheme}:// backend has no read-write locks or semaphores"
        )
