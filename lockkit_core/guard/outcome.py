"""``GuardContext``: what one app guards requests with (kit, settings, log, counts,
``on_lost`` hooks, the secret credentials are hashed with); ``Outcome``: what the guard
decided for one request and how it ends."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ..backends.aio import has_asyncio
from ..errors import BackendError, LockLost, LockNotOwned
from ..kit import LockKit
from ..lock import Lock
from . import deadlines
from .credentials import Secret
from .problems import LockStoreDown, Problem, RequestKeyInvalid, RequestKeyMissing, RequestLocked
from .settings import GuardSettings

__all__ = ["Counts", "GuardContext", "LostHook", "Outcome", "Problems", "in_loop"]

T = TypeVar("T")

LostHook = Callable[[Lock, str, BaseException], None]


class Counts(Counter[str]):
    """Refused, unlocked and lost requests by event: ``busy``, ``unavailable``,
    ``fail_open``, ``lost``, ``unreleased`` (and the idempotency layer's own)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def add(self, event: str) -> None:
        """Count one ``event``; safe from any thread."""
        with self._lock:
            self[event] += 1


@dataclass(frozen=True)
class Problems:
    """The error classes an adapter answers with (Flask's are also werkzeug exceptions)."""

    busy: type[RequestLocked] = RequestLocked
    down: type[LockStoreDown] = LockStoreDown
    missing: type[RequestKeyMissing] = RequestKeyMissing
    invalid: type[RequestKeyInvalid] = RequestKeyInvalid


@dataclass
class GuardContext:
    """What one app (Flask) or one ``LOCKKIT`` value (Django) guards requests with.
    ``secret``: the key credentials in lock keys are hashed with (the framework's
    ``SECRET_KEY``); without one, a template naming a credential is a ConfigError."""

    kit: LockKit
    settings: GuardSettings
    log: logging.Logger
    problems: Problems = field(default_factory=Problems)
    counts: Counts = field(default_factory=Counts)
    on_lost: list[LostHook] = field(default_factory=list)
    secret: Secret | None = None
    #: Each rule's ``kit.lock_maker``, made at its first request (see RequestRule.acquire),
    #: with the kit and config it was made for.
    lock_makers: dict[object, tuple[LockKit, object, Callable[[str], Lock]]] = field(
        default_factory=dict, repr=False, compare=False
    )


@dataclass
class Outcome:
    """One request's answer from the guard. ``refusal`` set: answer with it, run nothing.
    Otherwise run the view; ``lock`` is the held lock (None: not locked, or failed open)."""

    lock: Lock | None = None
    refusal: Problem | None = None
    route: str = ""
    context: GuardContext | None = None
    _once: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _deadline: deadlines.Deadline | None = field(default=None, repr=False)

    def _take(self) -> Lock | None:
        """The held lock, handed to exactly one caller: the stream's close and the
        ``STREAM_MAX_HOLD`` timer may race."""
        with self._once:
            lock, self.lock = self.lock, None
            deadline, self._deadline = self._deadline, None
        if deadline is not None:
            deadline.cancel()
        return lock

    def hold_stream(self) -> None:
        """The response is a stream the client reads at its own pace: release the lock at
        its close, or once ``STREAM_MAX_HOLD`` seconds have passed, whichever comes first;
        the latter is logged, counted and told to the ``on_lost`` hooks (the rest of the
        stream is sent unlocked)."""
        context = self.context
        limit = None if context is None else context.settings.stream_max_hold
        if self.lock is None or limit is None:
            return
        deadline = deadlines.at(time.monotonic() + limit, lambda: self._expire(limit))
        with self._once:
            if self.lock is None:  # closed meanwhile
                deadline.cancel()
                return
            self._deadline = deadline

    def _expire(self, limit: float) -> None:
        lock, context = self._take(), self.context
        if lock is None or context is None:
            return
        context.counts.add("stream_max_hold")
        context.log.warning(
            "%s: lock %r released before its streamed response ended: the client read for "
            "longer than STREAM_MAX_HOLD (%s s); the rest of the stream is sent unlocked",
            self.route, lock.key, limit,
        )  # fmt: skip
        self._release(lock, context)
        self._tell(context, lock, LockLost(lock.key, f"held past STREAM_MAX_HOLD ({limit} s)"))

    def release(self) -> None:
        """Give the lock back, once. A lease lost while the request ran (force-released,
        expired) or a store failing at release is logged with the key, counted and told to the
        ``on_lost`` hooks; it never replaces the response, whose work is already done."""
        lock, context = self._take(), self.context
        if lock is None or context is None:
            return
        self._release(lock, context)

    async def arelease(self) -> None:
        """:meth:`release` from async code, on the event loop where the store has an asyncio
        API (else in a worker thread)."""
        lock, context = self._take(), self.context
        if lock is None or context is None:
            return
        try:
            await in_loop(lock, lock.arelease, lock.release)
        except (LockNotOwned, BackendError) as exc:
            self._failed(lock, context, exc)

    def _release(self, lock: Lock, context: GuardContext) -> None:
        try:
            lock.release()
        except (LockNotOwned, BackendError) as exc:
            self._failed(lock, context, exc)

    def _failed(self, lock: Lock, context: GuardContext, exc: LockNotOwned | BackendError) -> None:
        if isinstance(exc, LockNotOwned):
            context.counts.add("lost")
            context.log.error(
                "%s: lock %r was lost while its request ran (another request may have run "
                "meanwhile; the response stands): %s", self.route, lock.key, exc,
            )  # fmt: skip
            self._tell(context, lock, exc)
        else:  # down, demoted, or any other store failure
            context.counts.add("unreleased")
            context.log.error(
                "%s: lock %r not released, the store is down (it frees within its ttl): %s",
                self.route, lock.key, exc,
            )  # fmt: skip
            self._tell(context, lock, exc)

    def _tell(self, context: GuardContext, lock: Lock, exc: BaseException) -> None:
        for hook in context.on_lost:
            try:
                hook(lock, self.route, exc)
            except Exception:  # a broken hook must not turn a finished request into a 500
                context.log.exception("an on_lost hook failed for lock %r", lock.key)


async def in_loop(lock: Lock, native: Callable[[], Awaitable[T]], blocking: Callable[[], T]) -> T:
    """Await ``native`` (one of ``lock``'s asyncio methods); on a store without an asyncio
    API, run ``blocking`` in a worker thread instead (the thread waits; the loop does not)."""
    if has_asyncio(lock.kit.backend):
        return await native()
    return await asyncio.to_thread(blocking)
