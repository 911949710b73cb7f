"""``Lock``: a handle on one key, with ``threading.Lock``-style ``acquire()``/``release()`` and
their asyncio forms (``aacquire()``, ``arelease()``, ``aextend()``, ``async with``).

A handle is cheap; what is held is a :class:`~lockkit_core.hold.Hold`, shared by every handle
that re-enters the same key in the same thread or asyncio task. Reentrancy is kept in
:mod:`lockkit_core.handle`; the acquire decisions are :mod:`lockkit_core.acquire`'s state
machine, run by :mod:`lockkit_core.drivers`; renewal is :mod:`lockkit_core.watchdog`'s. A
handle reaches its kit only through ``kit.backend``, ``kit.namespace`` and ``kit.holds``
(:class:`~lockkit_core.hold_table.Holds`, the table of holds it may re-enter). Handing a lease
to another process or to a batched store operation is :mod:`lockkit_core.handover`'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from . import drivers, lease, observe, process
from .acquire import Acquired, dead_on_arrival_error
from .backends.base import Grant, owner_hint
from .config import UNSET, Seconds, check_timeout
from .errors import ConfigError, LockNotOwned, LockTimeout
from .handle import OnLost
from .handover import HandOver
from .hold import Hold
from .process import new_owner_token
from .py310 import add_note
from .watchdog import watch

__all__ = ["Lock", "OnLost", "new_owner_token"]

log = logging.getLogger("lockkit")


def release_leaving(release: Callable[[], None], exc: BaseException | None) -> None:
    """Release on leaving a ``with`` block. A lost lease raises :class:`LockLost`, unless the
    block already raised: then the loss is added to that error as a note, never hiding it."""
    try:
        release()
    except LockNotOwned as lost:
        if exc is None:
            raise
        add_note(exc, f"lockkit: {lost}")


class Lock(HandOver):
    """A handle on one key. Use it as a context manager, or ``acquire()``/``release()``.

    Get one from :meth:`LockKit.lock`; it is cheap and may be reused after release.
    """

    def __repr__(self) -> str:
        state = "held" if self._view() is not None else "free"
        return f"<Lock {self.full_key!r} {state} token={self.token}>"

    # -- state -------------------------------------------------------------------------------

    @property
    def token(self) -> int | None:
        """The fencing token of the current acquisition (None when not held or unsupported)."""
        hold = self._view()
        return hold.token if hold is not None else None

    @property
    def owner(self) -> str | None:
        """The owner token. Pass it to ``kit.lock(key, owner=...)`` in another process to
        release or extend this acquisition there. Keep it secret: it is the key to the lock."""
        hold = self._view()
        return hold.owner if hold is not None else self._given_owner

    @property
    def owner_hint(self) -> str | None:
        """What ``kit.admin`` and ``lockkit list`` show of this owner (8 hex digits of a
        digest of the owner token): tells holders apart, useless for releasing."""
        owner = self.owner
        return None if owner is None else owner_hint(owner)

    @property
    def lost(self) -> bool:
        """True once the lease ran out or renewal failed while we held it."""
        hold = self._view()
        return hold is not None and hold.is_lost()

    def owned(self) -> bool:
        """True while the lease is valid and held through this handle: by this thread for a
        reentrant lock, by the acquisition (any thread) for ``reentrant=False``."""
        hold = self._here()
        return hold is not None and hold.pid == process.pid() and not hold.is_lost()

    def locked(self) -> bool:
        """True if anyone holds the key (asks the store)."""
        return self.kit.backend.info(self.full_key) is not None

    # -- acquire / release -------------------------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: Seconds = UNSET) -> bool:
        """Take the lock; False if someone else held it (``blocking=False``: after one attempt).

        ``timeout`` defaults to the handle's; ``None`` or ``-1`` waits forever, ``0`` not at
        all. A grant this call obtains is kept if its lease is still valid, even when the
        round trip outlasted ``timeout``. Raises :class:`BackendUnavailable` if the store
        cannot be reached: an outage is never reported as "busy".

        On a handle made with ``kit.lock(key, owner=token)`` it adopts that existing lease
        instead: it confirms on the store that ``token`` holds the key, renews the lease,
        and from then on renews, checks and releases it through this handle. It never waits
        and never takes a free key; if ``token`` does not hold the key it raises
        :class:`LockNotOwned`.
        """
        if timeout is UNSET and blocking:
            timeout = self.timeout
        else:
            timeout = self._timeout(blocking, timeout)
        if self.reentrant and self._reenter():
            return True
        # Not re-entered: contend on the store like any other owner (a non-reentrant handle
        # taken twice by one thread waits on itself, as threading.Lock does).
        backend = self.kit.backend
        if self._given_owner is not None:
            process.check_fork()  # as new_owner_token() does below
            sent = time.monotonic()
            ttl = lease.on_store(self.ttl)
            self._took(self._adopted(backend.adopt(self.full_key, self._given_owner, ttl), sent))
            return True
        owner = new_owner_token()
        wait = observe.waiting(self.labels)
        try:
            got = drivers.acquire(
                backend,
                self.full_key,
                self.key,
                owner,
                self.ttl,
                fair=self.fair,
                blocking=blocking and timeout != 0,
                timeout=timeout,
            )
        except BaseException as exc:
            observe.failed(wait, log, self.full_key, exc)
            raise
        return self._granted(got, owner, wait, timeout if blocking else 0)

    async def aacquire(self, blocking: bool = True, timeout: Seconds = UNSET) -> bool:
        """:meth:`acquire` for a coroutine: the same rules, and it never blocks the event loop.

        Cancelled while it waits, it leaves nothing on the store (no queue entry, no lease).
        The task that acquired re-enters; the acquisition belongs to the handle, so any task
        may ``arelease`` it (see :mod:`lockkit_core.handle`). Raises :class:`NotSupported` on
        a store without an asyncio API.
        """
        timeout = self._timeout(blocking, timeout)
        task = asyncio.current_task()
        assert task is not None  # awaited inside a task
        if self.reentrant and self._reenter(task):
            return True
        if self._given_owner is not None:
            process.check_fork()  # as new_owner_token() does below
        ops = self.kit.backend.aio()
        if self._given_owner is not None:
            sent = time.monotonic()
            ttl = lease.on_store(self.ttl)
            grant = await ops.adopt(self.full_key, self._given_owner, ttl)
            self._took(self._adopted(grant, sent, task))
            return True
        owner = new_owner_token()
        wait = observe.waiting(self.labels)
        try:
            got = await drivers.aacquire(
                self.kit.backend,
                self.full_key,
                self.key,
                owner,
                self.ttl,
                fair=self.fair,
                blocking=blocking and timeout != 0,
                timeout=timeout,
            )
        except BaseException as exc:
            observe.failed(wait, log, self.full_key, exc)
            raise
        return self._granted(got, owner, wait, timeout if blocking else 0, task)

    def _granted(
        self,
        got: Acquired | None,
        owner: str,
        wait: observe.Waiting | None,
        waited_for: float | None,
        task: asyncio.Task[Any] | None = None,
    ) -> bool:
        """Hold what the driver granted ``owner``; or, for None (the key stayed busy for
        ``waited_for`` seconds), report the refusal and return False."""
        if got is None:
            observe.refused(wait, log, self.full_key, waited_for)
            return False
        observe.waited(wait, "acquired", got.token)
        self._took(self.kit.holds.start(self, owner, got.token, got.valid_until, task))
        return True

    def _timeout(self, blocking: bool, timeout: Seconds) -> float | None:
        timeout = self.timeout if timeout is UNSET else check_timeout(timeout)
        if not blocking and timeout not in (None, 0):
            raise ConfigError("acquire(blocking=False) takes no timeout")
        return timeout

    def _adopted(self, grant: Grant, sent: float, task: asyncio.Task[Any] | None = None) -> Hold:
        """The hold of an adoption the store answered with ``grant`` (asked at ``sent``)."""
        owner = self._given_owner
        assert owner is not None
        if not grant.acquired:
            raise LockNotOwned(
                self.key,
                f"cannot adopt {self.key!r}: the owner token given to kit.lock(owner=...) "
                "does not hold it (its lease ran out, it was released, or another owner "
                "holds the key); adoption takes over an existing lease, never a free key",
            )
        now = time.monotonic()
        valid_until = sent + lease.validity(self.ttl)
        if self.ttl is not None and now >= valid_until:
            raise dead_on_arrival_error(self.key, self.ttl, now - sent, 1)
        return self.kit.holds.start(self, owner, grant.token, valid_until, task)

    def release(self) -> None:
        """Release one level of reentrancy; the store is told when the outermost one ends.

        A reentrant lock is released by the thread (or asyncio task) that holds it; a
        ``reentrant=False`` one by any (it belongs to its acquisition, as with
        ``threading.Lock``). Raises :class:`LockNotOwned` if we do not hold it,
        :class:`LockLost` if the lease had run out (someone else may have held the key).
        """
        hold = self._let_go()
        if isinstance(hold, Hold):
            hold.release()
        elif hold is not None:
            self._given_released(self.kit.backend.release(self.full_key, hold))

    async def arelease(self) -> None:
        """:meth:`release` for a coroutine."""
        hold = self._let_go()
        if isinstance(hold, Hold):
            await hold.arelease()
        elif hold is not None:
            self._given_released(await self.kit.backend.aio().release(self.full_key, hold))

    def _given_released(self, released: bool) -> None:
        if not released:
            raise LockNotOwned(
                self.key, f"cannot release {self.key!r}: that owner token does not hold it"
            )

    def extend(self, ttl: float | None = None) -> None:
        """Reset the lease to ``ttl`` seconds (default: the lock's ttl) from now.

        A lock taken without a lease (``ttl=None``) gets one: from then on it runs out like
        any other unless extended again, and ``auto_renew`` renews it.
        """
        new_ttl, hold = self._to_extend(ttl)
        if isinstance(hold, Hold):
            unleased = hold.ttl is None
            hold.extend(new_ttl, raise_on_loss=True)
            self._extended(hold, unleased)
        else:
            self._given_extended(self.kit.backend.extend(self.full_key, hold, new_ttl))

    async def aextend(self, ttl: float | None = None) -> None:
        """:meth:`extend` for a coroutine."""
        new_ttl, hold = self._to_extend(ttl)
        if isinstance(hold, Hold):
            unleased = hold.ttl is None
            await hold.aextend(new_ttl)
            self._extended(hold, unleased)
        else:
            done = await self.kit.backend.aio().extend(self.full_key, hold, new_ttl)
            self._given_extended(done)

    def _to_extend(self, ttl: float | None) -> tuple[float, Hold | str]:
        """The new ttl, and the hold to extend or the given owner token to extend directly."""
        new_ttl = self._new_ttl(ttl, "extend")
        hold = self._view()
        if hold is None:
            if self._given_owner is None:
                raise LockNotOwned(self.key, f"cannot extend {self.key!r}: not held")
            return new_ttl, self._given_owner
        self.check()
        return new_ttl, hold

    @staticmethod
    def _extended(hold: Hold, unleased: bool) -> None:
        if unleased:
            watch(hold)  # a lease now: the watchdog renews it or reports its end

    def _given_extended(self, done: bool) -> None:
        if not done:
            raise LockNotOwned(
                self.key, f"cannot extend {self.key!r}: that owner token does not hold it"
            )

    def __enter__(self) -> Lock:
        if not self.acquire():
            raise self._timed_out()
        return self

    async def __aenter__(self) -> Lock:
        if not await self.aacquire():
            raise self._timed_out()
        return self

    def _timed_out(self) -> LockTimeout:
        return LockTimeout(
            self.key,
            f"lock {self.key!r} is held elsewhere"
            + (f"; gave up after {self.timeout:g} s" if self.timeout else ""),
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        release_leaving(self.release, exc)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.arelease()
        except LockNotOwned as lost:
            if exc is None:
                raise
            add_note(exc, f"lockkit: {lost}")
