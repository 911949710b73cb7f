"""``FileBackend``: the ``file://`` backend, gluing the record store, grant decision, queue and
wake-ups together behind the :class:`~lockkit_core.backends.base.Backend` interface."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Concatenate, ParamSpec, TypeVar

from ...errors import LockKitError, NotSupported
from ...url import LockURL
from ..aio import AsyncOps, AsyncWaiter, LocalOps
from ..base import Backend, Capability, Grade, Grant, Lease, Waiter
from .grant import Grants, lease
from .places import FilePlaces
from .queue import AsyncFileWaiter, FileWaiter
from .record import Entry, NotARecord
from .store import RecordStore, Slot, default_directory, peek
from .wakeups import Bells

P = ParamSpec("P")
T = TypeVar("T")

#: how long after its last wait in a queue a process's blocking callers queue on first attempt
QUEUE_FIRST = 30.0


class FileBackend(Backend):
    """Lock files in one directory; exclusion among the processes of this host.

    ``file:///var/lock/app`` uses ``/var/lock/app``; ``file://`` alone uses
    :func:`default_directory`; a relative path is taken from the current directory. Everything
    after ``file://`` up to ``?`` is the path, verbatim.
    """

    schemes: ClassVar[tuple[str, ...]] = ("file",)
    capabilities: ClassVar[Capability] = (
        Capability.TTL
        | Capability.FENCING
        | Capability.FAIR
        | Capability.CROSS_PROCESS
        | Capability.LIST
        | Capability.HAND_OFF
        | Capability.NO_LEASE
        | Capability.SHARED
    )
    grade: ClassVar[Grade] = Grade.SINGLE_NODE

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        if sys.platform == "win32":
            raise NotSupported("the file:// backend needs fcntl.flock, which Windows lacks")
        where = url.raw[url.raw.index("://") + 3 :].partition("?")[0]
        self.directory = os.path.abspath(where) if where else default_directory()
        self._store = RecordStore(self.directory)
        self._grants = Grants(self._store)
        #: (key, owner) -> the waiter of a blocking caller: its attempts join the queue
        self._queued: dict[tuple[str, str], FileWaiter] = {}
        self._bells = Bells()
        #: read-write locks and semaphores (.places)
        self.places = FilePlaces(self.directory, self._store.fences, self._store)
        self.waited_at = -QUEUE_FIRST  # when a caller of this process last queued
        _backends.add(self)
        # A backend dropped without close() frees what it opened when it is collected.
        self._finalizer = weakref.finalize(self, _drop, self._store, self._grants, self._bells)
        self._finalizer.atexit = False  # the exit hook still needs them

    def describe(self) -> str:
        """``file://`` and the absolute directory."""
        return "file://" + self.directory

    def _locked(
        self,
        key: str,
        create: bool,
        action: Callable[Concatenate[Slot, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T | None:
        """Run ``action`` inside ``key``'s critical section (see :meth:`RecordStore.locked`)."""
        if os.getpid() != self._store.pid:
            self.after_fork_in_child()
        return self._store.locked(key, create, action, *args, **kwargs)

    # -- the Backend interface ---------------------------------------------------------------

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        """Take ``key`` if it is free, its lease ran out, or its holder process is gone, and
        no live waiter queued before the caller. With no lease (``ttl=math.inf``) the record
        never expires: the key is freed by its release, or by its holder process being gone."""
        waiter = self._queued.get((key, owner)) if self._queued else None
        if waiter is None:
            store = self._store
            if os.getpid() != store.pid:
                self.after_fork_in_child()
            done = store.locked(key, True, self._grants.try_acquire, owner, ttl, None)
            assert done is not None
            got, handed = done
        else:
            waiter.ttl = ttl
            sent = time.monotonic()
            done = self._locked(key, True, self._grants.try_acquire, owner, ttl, waiter)
            assert done is not None
            got, handed = done
            if waiter.queued and waiter.queued_at is None:
                waiter.queued_at = sent
        if handed is not None:
            self._wake(key, handed)
        return got

    def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds it and its lease has not run out, handing it to the
        oldest live waiter if any.

        A holder process that is gone does not matter here: while its token is still in the
        record nobody else took the key, so another process may release it with that token.
        """
        store = self._store
        if os.getpid() != store.pid:
            self.after_fork_in_child()
        done = store.locked(key, False, self._grants.release, owner)
        if done is None:
            return False
        if done[1] is not None:
            self._wake(key, done[1])
        if store.sweep_at <= time.monotonic():
            self._sweep_idle()
        return done[0]

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        """Reset the lease to ``ttl`` if ``owner`` holds it; a lease that ran out stays lost."""
        return bool(self._locked(key, False, self._grants.extend, owner, ttl))

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        """Take over ``owner``'s lease on ``key``: renew it to ``ttl`` and return its token, in
        one critical section; ``Grant(False)`` if ``owner`` does not hold ``key``."""
        got = self._locked(key, False, self._grants.adopt, owner, ttl)
        return Grant(False) if got is None else got

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        """Queue the caller's next attempts on ``key``; waiting is FIFO whatever ``fair``."""
        return FileWaiter(self, key, owner)

    # -- read-write locks and semaphores (.places) ----------------------------------------------

    def try_acquire_shared(self, key: str, owner: str, mode: str, limit: int, ttl: float) -> Grant:
        return self.places.try_acquire(key, owner, mode, limit, ttl)

    def release_shared(self, key: str, owner: str, mode: str) -> bool:
        return self.places.release(key, owner, mode)

    def extend_shared(self, key: str, owner: str, mode: str, ttl: float) -> bool:
        return self.places.adopt(key, owner, mode, ttl).acquired

    def adopt_shared(self, key: str, owner: str, mode: str, ttl: float) -> Grant:
        return self.places.adopt(key, owner, mode, ttl)

    def shared_waiter(self, key: str, owner: str, mode: str, limit: int) -> Waiter:
        return self.places.waiter(key, owner, mode)

    def shared_holders(self, key: str, mode: str, limit: int) -> list[Lease]:
        return self.places.holders(key, mode)

    def aio(self) -> AsyncOps:
        """Operations run inline (each a few microseconds inside a flock); waiters listen on
        their bell from the event loop, so none parks a thread."""
        return _FileOps(self)

    def queue_first(self) -> bool:
        """True while this process has queued lately: its blocking callers then register
        before their first attempt, which spares a contended caller one critical section and
        costs an uncontended one a few microseconds."""
        return time.monotonic() - self.waited_at < QUEUE_FIRST

    def _wake(self, key: str, entry: Entry | None) -> None:
        """Tell the waiter of ``entry`` it was handed ``key``; if its socket is gone (it left
        without leaving the queue) and it is of this host and pid namespace, pass the key on."""
        store = self._store
        while (
            entry is not None
            and self._bells.ring(entry)
            and entry.pidns == store.pidns
            and entry.host == store.host
        ):
            entry = self._locked(key, False, self._grants.pass_on, entry)

    def _sweep_idle(self, everything: bool = False) -> None:
        store = self._store
        if everything or (store.idle and store.sweep_at <= time.monotonic()):
            if os.getpid() != store.pid:
                self.after_fork_in_child()
            self._grants.sweep(everything)

    def _withdraw(self, key: str, owner: str, patient: bool = True) -> None:
        if patient:
            self._wake(key, self._locked(key, False, self._grants.leave_queue, owner))
            return
        # After a failure: one try that waits for nobody; else the entry lapses by itself.
        with contextlib.suppress(LockKitError):
            if os.getpid() == self._store.pid:
                self._wake(
                    key, self._store.locked_briefly(key, 0.0, self._grants.leave_queue, owner)
                )

    def list(self, prefix: str) -> list[Lease]:
        """Held locks whose key starts with ``prefix``, sorted by key."""
        leases: list[Lease] = []
        store = self._store
        for name in store.names():
            if not name.endswith(".lock"):
                continue
            if name.startswith("k-"):
                if not name[2:-5].startswith(prefix):
                    continue
            elif not name.startswith("h-"):
                continue
            path = os.path.join(self.directory, name)
            try:
                rec = peek(path)
            except OSError as exc:
                raise store.unavailable(exc, path) from exc
            except NotARecord:
                continue  # acquiring its key reports it
            if rec is None:
                continue
            store.check_host(rec, path)
            now = time.monotonic()
            key = rec.key.decode("utf-8", "surrogatepass")
            if key.startswith(prefix) and store.held(rec, now):
                leases.append(lease(rec, key, now))
        leases.sort(key=lambda held: held.key)
        return leases

    def info(self, key: str) -> Lease | None:
        """The lease on ``key``, or None if it is free."""
        return self._locked(key, False, self._grants.info, key)

    def force_release(self, key: str) -> bool:
        """Free ``key`` whoever holds it (handing it to the oldest live waiter, if any);
        False if it was free. The fence counter stays."""
        done = self._locked(key, False, self._grants.force_release)
        if done is None:
            return False
        self._wake(key, done[1])
        return done[0]

    # -- lifecycle ---------------------------------------------------------------------------

    def _at_exit(self) -> None:
        _detach(self._store, self._grants)

    def after_fork_in_child(self) -> None:
        """Close the inherited descriptors: they share their flocks with the parent's."""
        self._queued = {}
        self._bells.close()  # the parent's: its bells would ring here too
        self._store.after_fork_in_child()
        self.places.queued = {}

    def close(self) -> None:
        """Remove the records this process left free, close the cached descriptors and
        sockets. Held locks stay held until their TTL."""
        with contextlib.suppress(LockKitError):
            self._sweep_idle(everything=True)
        self._store.close()
        self._bells.close()


class _FileOps(LocalOps):
    """file:// on an event loop (see :meth:`FileBackend.aio`)."""

    backend: FileBackend

    async def waiter(self, key: str, owner: str, fair: bool) -> AsyncWaiter:
        return AsyncFileWaiter(FileWaiter(self.backend, key, owner))


def _drop(store: RecordStore, grants: Grants, bells: Bells) -> None:
    if os.getpid() != store.pid:
        store.after_fork_in_child()  # closes the inherited files without their mutexes
    else:
        with contextlib.suppress(LockKitError):
            grants.sweep(everything=True)
        if store.written:
            _orphans.append((store, grants))  # its held records are still detached at exit
        store.close()
    bells.close()


def _detach(store: RecordStore, grants: Grants) -> None:
    """Mark this process's held records detached (negative pid) so that their leases run
    until their TTL: a holder pid that is gone frees a key at once, which is right after a
    crash but would drop a lock whose owner token was handed to another process. A record
    without a lease stays attached: it has no TTL to run until, so its holder's end frees it."""
    if os.getpid() != store.pid:
        return
    with contextlib.suppress(LockKitError):
        grants.sweep(everything=True)
    store.me = store.tail(-store.pid)  # a watchdog renewing after this writes it too
    for key, owner in list(store.written.items()):
        with contextlib.suppress(LockKitError):
            store.locked(key, False, grants.detach, owner)


_backends: weakref.WeakSet[FileBackend] = weakref.WeakSet()
#: stores of backends collected while they held records this process wrote
_orphans: list[tuple[RecordStore, Grants]] = []


@atexit.register
def _detach_all() -> None:
    for backend in list(_backends):
        backend._at_exit()
    for store, grants in _orphans:
        _detach(store, grants)


__all__ = ["FileBackend"]
