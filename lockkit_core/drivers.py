"""The two drivers of the acquire state machine (:func:`lockkit_core.acquire.plan`): blocking
(:func:`acquire`, behind ``Lock.acquire``) and asyncio (:func:`aacquire`, behind
``Lock.aacquire``). They only perform the machine's steps on the store; every decision is the
machine's. Besides the steps, each driver closes its waiter whatever happened, and the asyncio
one gives back a grant its cancelled caller can no longer use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator

from . import lease
from .acquire import ATTEMPT, REGISTER, Acquired, Step, Wait, at_once, plan
from .backends.aio import AsyncOps, AsyncWaiter
from .backends.base import Backend, Grant, Waiter
from .errors import BackendError, BackendUnavailable
from .py310 import cancelling
from .sansio import arun, run

__all__ = ["aacquire", "acquire", "agive_back", "give_back"]

log = logging.getLogger("lockkit")


def acquire(
    backend: Backend,
    full_key: str,
    key: str,
    owner: str,
    ttl: float | None,
    *,
    fair: bool,
    blocking: bool,
    timeout: float | None,
) -> Acquired | None:
    """Take ``full_key`` for ``owner``, blocking; None only if it stayed busy until ``timeout``
    (see :func:`~lockkit_core.acquire.plan`)."""
    first = None
    queue_first = blocking and backend.queue_first()
    if not queue_first:
        # The first attempt, made here: most acquisitions end with it (see at_once).
        sent = time.monotonic()
        grant = backend.try_acquire(full_key, owner, lease.on_store(ttl))
        got = at_once(grant, sent, time.monotonic(), ttl)
        if got is not None:
            return got
        first = sent, grant
    waiter: Waiter | None = None
    acquired = False
    reachable = True

    def do(step: Step) -> Grant | None:
        nonlocal waiter
        if step is ATTEMPT:
            return backend.try_acquire(full_key, owner, lease.on_store(ttl))
        if isinstance(step, Wait):
            assert waiter is not None
            return waiter.wait(step.seconds)
        if step is REGISTER:
            waiter = backend.waiter(full_key, owner, fair)
        else:
            give_back(backend.release, full_key, owner)
        return None

    steps = plan(key, ttl, blocking=blocking, timeout=timeout, queue_first=queue_first, first=first)
    try:
        got = run(steps, do)
        acquired = got is not None
        return got
    except BackendUnavailable:
        reachable = False  # leaving the queue would cost the caller another timeout
        raise
    finally:
        if waiter is not None:
            waiter.close(acquired, reachable=reachable)


async def aacquire(
    backend: Backend,
    full_key: str,
    key: str,
    owner: str,
    ttl: float | None,
    *,
    fair: bool,
    blocking: bool,
    timeout: float | None,
) -> Acquired | None:
    """:func:`acquire` for a coroutine; it never blocks the event loop.

    Cancelled (``asyncio.wait_for``, a task group), it leaves nothing behind: its waiter
    leaves the queue and passes on a lock handed over meanwhile, and a grant that may have
    been made while it was being cancelled is given back.
    """
    ops = backend.aio()

    async def attempt() -> Grant:
        try:
            grant = await ops.try_acquire(full_key, owner, lease.on_store(ttl))
        except asyncio.CancelledError:
            # The store may have granted it (or queued us) before we stopped listening.
            await _finish(_abandon(ops, full_key, owner))
            raise
        except BackendError:
            if not _cancel_swallowed():
                raise
            grant = Grant(False)
        if _cancel_swallowed():
            await _finish(_abandon(ops, full_key, owner))
            raise asyncio.CancelledError
        return grant

    first = None
    queue_first = blocking and backend.queue_first()
    if not queue_first:
        sent = time.monotonic()  # the first attempt, made here as in acquire()
        grant = await attempt()
        got = at_once(grant, sent, time.monotonic(), ttl)
        if got is not None:
            return got
        first = sent, grant
    waiter: AsyncWaiter | None = None
    acquired = False
    reachable = True

    async def do(step: Step) -> Grant | None:
        nonlocal waiter
        if step is ATTEMPT:
            return await attempt()
        if isinstance(step, Wait):
            assert waiter is not None
            handed = await waiter.wait(step.seconds)
            if _cancel_swallowed():
                raise asyncio.CancelledError  # the waiter's close passes a hand-over on
            return handed
        if step is REGISTER:
            waiter = await ops.waiter(full_key, owner, fair)
        else:
            await agive_back(ops, full_key, owner)
        return None

    steps = plan(key, ttl, blocking=blocking, timeout=timeout, queue_first=queue_first, first=first)
    try:
        got = await arun(steps, do)
        acquired = got is not None
    except BackendUnavailable:
        reachable = False
        raise
    finally:
        if waiter is not None:
            try:
                await _finish(waiter.close(acquired, reachable=reachable))
            except asyncio.CancelledError:
                if acquired:  # cancelled on the way out: the caller never sees the grant
                    await _finish(agive_back(ops, full_key, owner))
                raise
    return got


def _cancel_swallowed() -> bool:
    """True if this task was cancelled but the cancellation never reached us: a driver that
    turns it into a connection error and retries (a redis.asyncio request cancelled on its
    way), or catches it. Going on would take the lock for a caller that has left."""
    task = asyncio.current_task()
    return task is not None and cancelling(task) > 0


async def _abandon(ops: AsyncOps, full_key: str, owner: str) -> None:
    with refused_give_back(full_key):
        await ops.abandon(full_key, owner)


async def _finish(work: Awaitable[None]) -> None:
    """Await clean-up ``work`` to its end even if the caller is cancelled meanwhile (the
    cancellation is raised once it is done), so a cancelled waiter leaves nothing behind."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        raise


def give_back(release: Callable[[str, str], bool], full_key: str, owner: str) -> None:
    """Release a grant we will not use (see :func:`refused_give_back`)."""
    with refused_give_back(full_key):
        release(full_key, owner)


async def agive_back(ops: AsyncOps, full_key: str, owner: str) -> None:
    """:func:`give_back` on the event loop."""
    with refused_give_back(full_key):
        await ops.release(full_key, owner)


@contextlib.contextmanager
def refused_give_back(full_key: str) -> Iterator[None]:
    """If the store refuses a give-back, the grant expires by its TTL: log it and go on.

    :class:`BackendUnavailable` propagates: the next attempt would only spend another
    socket timeout of the caller's on a store that cannot be reached.
    """
    try:
        yield
    except BackendUnavailable:
        raise
    except BackendError:
        log.warning("could not give back a late grant of %r; it expires by TTL", full_key)
