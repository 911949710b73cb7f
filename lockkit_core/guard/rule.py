"""``RequestRule``: which requests lock, on what key, how long they wait; ``Outcome``: what
the guard decided for one request (held / busy / store down / not locked) and how it ends.

An adapter supplies the request's method, its route's name and its sources, turns a refusal
into its framework's response, exposes the held lock to the view, and calls
:meth:`Outcome.release` from whatever ends the response (a stream's close, a commit). The
lock is ``reentrant=False``: it belongs to the request, so the thread that closes a stream
(or runs ``asyncio.to_thread`` for an async view) may release it.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ..config import UNSET, check_lock_ttl
from ..errors import BackendUnavailable, ConfigError, LockNotOwned
from ..kit import LockKit
from ..lock import Lock
from .keys import KeyFunc, RequestKey, Source
from .problems import LockStoreDown, Problem, RequestKeyMissing, RequestLocked
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


@dataclass
class GuardContext:
    """What one app (Flask) or one ``LOCKKIT`` value (Django) guards requests with."""

    kit: LockKit
    settings: GuardSettings
    log: logging.Logger
    problems: Problems = field(default_factory=Problems)
    counts: Counts = field(default_factory=Counts)
    on_lost: list[LostHook] = field(default_factory=list)


@dataclass
class Outcome:
    """One request's answer from the guard. ``refusal`` set: answer with it, run nothing.
    Otherwise run the view; ``lock`` is the held lock (None: not locked, or failed open)."""

    lock: Lock | None = None
    refusal: Problem | None = None
    route: str = ""
    context: GuardContext | None = None

    def release(self) -> None:
        """Give the lock back, once. A lease lost while the request ran (force-released,
        expired) or a store down at release is logged with the key, counted and told to the
        ``on_lost`` hooks; it never replaces the response, whose work is already done."""
        lock, context = self.lock, self.context
        if lock is None or context is None:
            return
        self.lock = None
        try:
            lock.release()
        except LockNotOwned as exc:
            context.counts.add("lost")
            context.log.error(
                "%s: lock %r was lost while its request ran (another request may have run "
                "meanwhile; the response stands): %s", self.route, lock.key, exc,
            )  # fmt: skip
            self._tell(context, lock, exc)
        except BackendUnavailable as exc:
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
        try:
            if self.key.func is not None:
                assert callable(values)
                key = self.key.from_func(values(self.key.func), route)
            else:
                assert not callable(values)
                key = self.key.render(route, values, context.problems.missing)
        except RequestKeyMissing as missing:
            context.log.info("%s refused (400): %s", route, missing)
            return Outcome(refusal=missing, route=route)
        if self.scope == "route":
            key = f"{route}:{key}"
        wait = context.settings.wait if self.wait is UNSET else self.wait
        lock = context.kit.lock(key, ttl=self.ttl, reentrant=False)
        try:
            acquired = lock.acquire(timeout=wait)
        except BackendUnavailable as exc:
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
        if not acquired:
            context.counts.add("busy")
            context.log.info("%s refused (409): %r is held", route, key)
            retry = context.settings.retry_after
            return Outcome(refusal=context.problems.busy(key, route, retry), route=route)
        return Outcome(lock=lock, route=route, context=context)
