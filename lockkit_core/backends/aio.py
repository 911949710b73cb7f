"""The asyncio side of a backend: :class:`AsyncOps` and :class:`AsyncWaiter`.

``Backend.aio()`` returns the store's operations for the running event loop. They mirror the
blocking ones (``try_acquire``, ``release``, ``extend``, ``adopt``, ``waiter``) and never block
the loop: a networked store speaks its driver's native asyncio client; a store whose every
operation is a few microseconds of local work (memory, file) runs those inline
(:class:`LocalOps`) and only its *waiting* is asynchronous, with no thread per waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from ..errors import NotSupported
from ..py310 import wait_at_most
from .base import Backend, Grant, SleepWaiter

__all__ = [
    "AsyncOps",
    "AsyncSleepWaiter",
    "AsyncWaiter",
    "Executor",
    "ExecutorOps",
    "LocalOps",
    "LoopEvent",
    "PerLoop",
    "has_asyncio",
]


class AsyncWaiter(ABC):
    """The asyncio form of :class:`~lockkit_core.backends.base.Waiter`, with the same protocol.

    ``close`` must also be safe to call when the task was cancelled inside ``wait``: it then
    leaves the queue, and passes on a lock handed over meanwhile (``acquired=False``).
    """

    @abstractmethod
    async def wait(self, timeout: float) -> Grant | None:
        """Return after ``timeout`` seconds at the latest, earlier if the key was released;
        a :class:`Grant` if the store handed the lock to this waiter."""

    async def close(self, acquired: bool, *, reachable: bool = True) -> None:
        """Drop the registration (see ``Waiter``)."""


class AsyncSleepWaiter(AsyncWaiter):
    """Fallback for stores that cannot notify: :class:`SleepWaiter`'s backoff, awaited."""

    def __init__(self, first: float = 0.0005, cap: float = 0.05) -> None:
        self._backoff = SleepWaiter(first, cap)

    async def wait(self, timeout: float) -> Grant | None:
        await asyncio.sleep(self._backoff.next_delay(timeout))
        return None


class LoopEvent:
    """What another thread (a listener, a driver's callbacks) sets for an asyncio waiter: it
    wakes the waiter's loop."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def set(self) -> None:
        with contextlib.suppress(RuntimeError):  # its loop was closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` for :meth:`set`, then clear it."""
        await wait_at_most(self._event.wait(), seconds)
        self._event.clear()


class AsyncOps(ABC):
    """A store's operations for one event loop (see the module docstring)."""

    @abstractmethod
    async def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        """As ``Backend.try_acquire``."""

    @abstractmethod
    async def release(self, key: str, owner: str) -> bool:
        """As ``Backend.release``."""

    @abstractmethod
    async def extend(self, key: str, owner: str, ttl: float) -> bool:
        """As ``Backend.extend``."""

    @abstractmethod
    async def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        """As ``Backend.adopt``."""

    async def waiter(self, key: str, owner: str, fair: bool) -> AsyncWaiter:
        """As ``Backend.waiter``: register before the attempt that precedes the wait."""
        return AsyncSleepWaiter()

    async def abandon(self, key: str, owner: str) -> None:
        """Undo whatever an attempt by ``owner`` that was cancelled on its way may have done
        on the store (taken the key; queued it, where attempts queue): by default, release."""
        await self.release(key, owner)


class LocalOps(AsyncOps):
    """For stores whose operations are local and microseconds long: run them inline.

    Only waiting takes time, and each such store gives its own :meth:`waiter`.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        return self.backend.try_acquire(key, owner, ttl)

    async def release(self, key: str, owner: str) -> bool:
        return self.backend.release(key, owner)

    async def extend(self, key: str, owner: str, ttl: float) -> bool:
        return self.backend.extend(key, owner, ttl)

    async def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        return self.backend.adopt(key, owner, ttl)


T = TypeVar("T")

#: the longest pause between two looks of a waiter on such a store (seconds)
EXECUTOR_WAIT_CAP = 0.1


class Executor:
    """A backend's small thread pool for :class:`ExecutorOps`, made on first use: ``threads``
    of them (one keeps the statements in the order they were asked, as a store that takes one
    writer at a time, SQLite, would run them anyway)."""

    def __init__(self, name: str, threads: int = 1) -> None:
        self._name = name
        self._threads = threads
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix=self._name)
            return self._pool

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's threads are not here."""
        self._lock = threading.Lock()
        self._pool = None

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)


class ExecutorOps(AsyncOps):
    """For stores whose driver only blocks (sqlite3), whose every operation is one short
    statement: each runs on the backend's :class:`Executor` (a thread or a few per kit, never
    one per waiter or per call), and waiters look again after a jittered backoff slept on the
    loop, up to :data:`EXECUTOR_WAIT_CAP`.

    A statement cannot be interrupted in its thread: a caller cancelled meanwhile waits for
    it to end (it is bounded by the store's own timeouts) and is then cancelled, so the
    driver gives back a grant after it was made, never before."""

    def __init__(self, backend: Backend, executor: Executor) -> None:
        self.backend = backend
        self._executor = executor

    async def _call(self, function: Callable[..., T], *args: object) -> T:
        future = asyncio.get_running_loop().run_in_executor(self._executor.pool(), function, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await asyncio.wait([future])
            if not future.cancelled():
                future.exception()  # seen: the driver gives back a grant it may have made
            raise

    async def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        return await self._call(self.backend.try_acquire, key, owner, ttl)

    async def release(self, key: str, owner: str) -> bool:
        return await self._call(self.backend.release, key, owner)

    async def extend(self, key: str, owner: str, ttl: float) -> bool:
        return await self._call(self.backend.extend, key, owner, ttl)

    async def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        return await self._call(self.backend.adopt, key, owner, ttl)

    async def waiter(self, key: str, owner: str, fair: bool) -> AsyncWaiter:
        return AsyncSleepWaiter(cap=EXECUTOR_WAIT_CAP)


OpsT = TypeVar("OpsT")


class PerLoop(Generic[OpsT]):
    """One value per event loop, made on the loop's first use and dropped with the loop: a
    networked store's asyncio operations hold that loop's connections and futures."""

    def __init__(self) -> None:
        self._made: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, OpsT] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, make: Callable[[], OpsT]) -> OpsT:
        """The running loop's value, made with ``make()`` if it has none yet (call it from a
        coroutine)."""
        loop = asyncio.get_running_loop()
        made = self._made.get(loop)
        if made is None:
            made = self._made[loop] = make()
        return made


def has_asyncio(backend: Backend) -> bool:
    """Whether ``backend`` has an asyncio API (``Lock.aacquire`` and friends); call it from
    the event loop that would use it."""
    try:
        backend.aio()
    except NotSupported:
        return False
    return True
