"""``SharedLock``: one place in a read-write lock or a semaphore (see ``rwlock``, ``semaphore``).

The store keeps the queue (``Backend.acquire_shared``): waiters are served in arrival order.
Places are not leases: they are held until ``release()`` or until the holder's connection to
the store ends (a ZooKeeper session), so there is no ttl, renewal or ``on_lost`` here.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import TYPE_CHECKING

from .config import UNSET, Seconds, check_timeout
from .errors import ConfigError, LockLost, LockNotOwned, LockTimeout
from .keys import check_key, namespaced
from .lock import new_owner_token, release_leaving

if TYPE_CHECKING:
    from .kit import LockKit

__all__ = ["SharedLock"]


class SharedLock:
    """A place of ``mode`` (``"read"``, ``"write"`` or ``"slot"``) on ``key``; a context
    manager that raises :class:`LockTimeout` when ``timeout`` passes first."""

    def __init__(self, kit: LockKit, key: str, mode: str, limit: int, timeout: Seconds) -> None:
        check_key(key)
        self.kit = kit
        self.key = key
        self.full_key = namespaced(kit.namespace, key)
        self.mode = mode
        self.limit = limit
        self.timeout = kit.config.timeout if timeout is UNSET else check_timeout(timeout)
        self.token: int | None = None  #: the fencing token of the place while held
        self._owner: str | None = None
        self._pid = 0

    def __repr__(self) -> str:
        state = "held" if self._owner is not None else "free"
        return f"<{type(self).__name__} {self.full_key!r} {self.mode} {state}>"

    def acquire(self, blocking: bool = True, timeout: Seconds = UNSET) -> bool:
        """Take a place; False if none came free within ``timeout`` (``blocking=False``: at
        once). A handle holds at most one place at a time."""
        wait = self.timeout if timeout is UNSET else check_timeout(timeout)
        if not blocking:
            if timeout not in (UNSET, None, 0):
                raise ConfigError("acquire(blocking=False) takes no timeout")
            wait = 0.0
        if self._owner is not None:
            raise LockNotOwned(self.key, f"{self!r} already holds a place; release it first")
        owner = new_owner_token()
        token = self.kit.backend.acquire_shared(self.full_key, owner, self.mode, self.limit, wait)
        if token is None:
            return False
        self._owner, self.token, self._pid = owner, token, os.getpid()
        return True

    def release(self) -> None:
        """Give the place back; :class:`LockLost` if the store no longer had it."""
        owner = self._owner
        if owner is None or self._pid != os.getpid():
            raise LockNotOwned(self.key, f"cannot release {self.key!r}: no place held here")
        self._owner, self.token = None, None
        if not self.kit.backend.release_shared(self.full_key, owner, self.mode):
            raise LockLost(
                self.key, f"the place on {self.key!r} was lost (the store's session ended)"
            )

    def owned(self) -> bool:
        """True while this handle holds a place (as far as it knows; no round trip)."""
        return self._owner is not None and self._pid == os.getpid()

    def __enter__(self) -> SharedLock:
        if not self.acquire():
            raise LockTimeout(
                self.key,
                f"no {self.mode} place on {self.key!r} came free"
                + (f" within {self.timeout:g} s" if self.timeout else ""),
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        release_leaving(self.release, exc)
