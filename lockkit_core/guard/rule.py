"""``RequestRule``: which requests lock, on what key, how long they wait; ``Outcome``: what
the guard decided for one request (held / busy / store down / not locked) and how it ends.

An adapter supplies the request's method, its route's name and its sources, turns a refusal
into its framework's response, exposes the held lock to the view, and calls
:meth:`Outcome.release` from whatever ends the response (a stream's close, a commit). The
lock is ``reentrant=False``: it belongs to the request, so the thread that closes a stream
may release it. Async code uses :meth:`RequestRule.adecide` and :meth:`Outcome.arelease`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

from ..backends.aio import has_asyncio
from ..config import UNSET, check_lock_ttl
from ..errors import BackendUnavailable, ConfigError, LockLost, LockNotOwned
from ..kit import LockKit
from ..lock import Lock
from . import deadlines
from .credentials import Secret
from .keys import KeyFunc, RequestKey, Source
from .problems import (
    LockStoreDown,
    Problem,
    RequestKeyInvalid,
    RequestKeyMissing,
    RequestLocked,
)
from .settings import GuardSettings, check_request_wait

__all__ = [
    "HTTP_METHODS",
    "NOT_LOCKED",
    "Counts",
    "GuardContext",
    "LostHook",
    "Outcome",
    "Problems",
    "RequestRule",
    "Scope",
]

HTTP_METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)
T = TypeVar("T")
Scope = Literal["global", "route"]
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
        expired) or a store down at release is logged with the key, counted and told to the
        ``on_lost`` hooks; it never replaces the response, whose work is already done."""
        lock, context = self._take(), self.context
        if lock is None or context is None:
            return
        try:
            lock.release()
        except (LockNotOwned, BackendUnavailable) as exc:
            self._failed(lock, context, exc)

    async def arelease(self) -> None:
        """:meth:`release` from async code, on the event loop where the store has an asyncio
        API (else in a worker thread)."""
        lock, context = self._take(), self.context
        if lock is None or context is None:
            return
        try:
            await in_loop(lock, lock.arelease, lock.release)
        except (LockNotOwned, BackendUnavailable) as exc:
            self._failed(lock, context, exc)

    def _release(self, lock: Lock, context: GuardContext) -> None:
        try:
            lock.release()
        except (LockNotOwned, BackendUnavailable) as exc:
            self._failed(lock, context, exc)

    def _failed(
        self, lock: Lock, context: GuardContext, exc: LockNotOwned | BackendUnavailable
    ) -> None:
        if isinstance(exc, LockNotOwned):
            context.counts.add("lost")
            context.log.error(
                "%s: lock %r was lost while its request ran (another request may have run "
                "meanwhile; the response stands): %s", self.route, lock.key, exc,
            )  # fmt: skip
            self._tell(context, lock, exc)
        else:
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


NOT_LOCKED: Final = Outcome()


class RequestRule:
    """Lock requests on ``key``; ``wait`` seconds (default: the ``WAIT`` setting) before a
    busy lock answers 409. See :class:`~lockkit_core.guard.RequestKey` for templates."""

    def __init__(
        self,
        key: str | KeyFunc,
        *,
        sources: Mapping[str, Source],
        wait: Any = UNSET,
        ttl: Any = UNSET,
        methods: Iterable[str] | None = None,
        fail_open: bool = False,
        scope: Scope = "global",
        on_busy: Callable[..., Any] | None = None,
    ) -> None:
        self.key = RequestKey(key, sources)
        self.wait = UNSET if wait is UNSET else check_request_wait(wait, "wait")
        # Left out: the kit's ttl. None: no lease, as kit.lock(ttl=None) (memory://, file://).
        self.ttl = UNSET if ttl is UNSET else check_lock_ttl(ttl)
        if isinstance(methods, str):
            raise ConfigError(f"methods must be a list such as [{methods!r}], not a string")
        self.methods = None if methods is None else frozenset(str(m).upper() for m in methods)
        if self.methods is not None and not self.methods <= HTTP_METHODS:
            raise ConfigError(
                f"methods {sorted(self.methods - HTTP_METHODS)} are not HTTP methods; "
                f"use some of {sorted(HTTP_METHODS)}"
            )
        if self.methods is not None and "GET" in self.methods:
            self.methods |= {"HEAD"}  # both frameworks answer HEAD with the GET view
        if not isinstance(fail_open, bool):
            raise ConfigError(f"fail_open must be True or False, got {fail_open!r}")
        self.fail_open = fail_open
        if scope not in ("global", "route"):
            raise ConfigError(
                f"scope must be 'global' (the key as written, shared with every route and "
                f"task using it) or 'route' (prefixed by the route's name), got {scope!r}"
            )
        self.scope = scope
        if on_busy is not None and not callable(on_busy):
            raise ConfigError(f"on_busy must be a callable (request, exc), got {on_busy!r}")
        self.on_busy = on_busy

    def __repr__(self) -> str:
        return f"RequestRule({self.key.template or self.key.func!r})"

    def applies(self, context: GuardContext, method: str) -> bool:
        """Whether a request with ``method`` locks at all (no I/O)."""
        return context.settings.enabled and (self.methods is None or method in self.methods)

    def decide(
        self,
        context: GuardContext,
        route: str,
        values: Mapping[str, Any] | Callable[[KeyFunc], object],
    ) -> Outcome:
        """Build the key and try the lock, waiting up to the rule's wait (this does I/O: run
        it in a worker thread from async code). ``values``: the URL arguments and sources a
        template reads, or a function that calls the key function with the framework's
        arguments. The outcome is held, refused (busy, store down, value missing) or, for a
        rule that fails open on a store that is down, not locked."""
        start = self._start(context, route, values)
        if isinstance(start, Outcome):
            return start
        lock, wait = start
        try:
            acquired = lock.acquire(timeout=wait)
        except BackendUnavailable as exc:
            return self._down(context, route, lock.key, exc)
        return self._judge(context, route, lock, acquired)

    async def adecide(
        self,
        context: GuardContext,
        route: str,
        values: Mapping[str, Any] | Callable[[KeyFunc], object],
    ) -> Outcome:
        """:meth:`decide` from async code: the lock is awaited on the event loop
        (``Lock.aacquire``), no thread per request, on stores with an asyncio API; on the
        others the wait runs in a worker thread. The key is built on the loop."""
        start = self._start(context, route, values)
        if isinstance(start, Outcome):
            return start
        lock, wait = start
        try:
            acquired = await in_loop(
                lock,
                functools.partial(lock.aacquire, timeout=wait),
                functools.partial(lock.acquire, timeout=wait),
            )
        except BackendUnavailable as exc:
            return self._down(context, route, lock.key, exc)
        return self._judge(context, route, lock, acquired)

    def _start(
        self,
        context: GuardContext,
        route: str,
        values: Mapping[str, Any] | Callable[[KeyFunc], object],
    ) -> tuple[Lock, float | None] | Outcome:
        """The request's lock and how long to wait for it, or the refusal of a request whose
        key cannot be built."""
        try:
            limit, invalid = context.settings.max_key_bytes, context.problems.invalid
            if self.key.func is not None:
                assert callable(values)
                key = self.key.from_func(values(self.key.func), route, limit, invalid)
            else:
                assert not callable(values)
                key = self.key.render(
                    route, values, context.problems.missing, secret=context.secret,
                    max_bytes=limit, invalid=invalid,
                )  # fmt: skip
        except (RequestKeyMissing, RequestKeyInvalid) as bad:
            context.counts.add("bad_request")
            context.log.info("%s refused (400): %s", route, bad)
            return Outcome(refusal=bad, route=route)
        if self.scope == "route":
            key = f"{route}:{key}"
        wait = context.settings.wait if self.wait is UNSET else self.wait
        return context.kit.lock(key, ttl=self.ttl, reentrant=False), wait

    def _down(
        self, context: GuardContext, route: str, key: str, exc: BackendUnavailable
    ) -> Outcome:
        if self.fail_open:
            context.counts.add("fail_open")
            context.log.warning(
                "%s runs WITHOUT its lock %r: the lock store is down and the rule fails "
                "open (%s)", route, key, exc,
            )  # fmt: skip
            return Outcome(route=route)
        context.counts.add("unavailable")
        context.log.error("%s refused (503): lock store down: %s", route, exc)
        retry = context.settings.retry_after
        return Outcome(refusal=context.problems.down(key, route, retry), route=route)

    @staticmethod
    def _judge(context: GuardContext, route: str, lock: Lock, acquired: bool) -> Outcome:
        if not acquired:
            context.counts.add("busy")
            context.log.info("%s refused (409): %r is held", route, lock.key)
            retry = context.settings.retry_after
            return Outcome(refusal=context.problems.busy(lock.key, route, retry), route=route)
        return Outcome(lock=lock, route=route, context=context)


async def in_loop(lock: Lock, native: Callable[[], Awaitable[T]], blocking: Callable[[], T]) -> T:
    """Await ``native`` (one of ``lock``'s asyncio methods); on a store without an asyncio
    API, run ``blocking`` in a worker thread instead (the thread waits; the loop does not)."""
    if has_asyncio(lock.kit.backend):
        return await native()
    return await asyncio.to_thread(blocking)
