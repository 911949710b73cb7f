"""``RequestRule``: which requests lock, on what key, how long they wait; it decides, for one
request, held / busy / store down / not locked (an :class:`~.outcome.Outcome`).

An adapter supplies the request's method, its route's name and its sources, turns a refusal
into its framework's response, exposes the held lock to the view, and calls
:meth:`Outcome.release` from whatever ends the response (a stream's close, a commit). The
lock is ``reentrant=False``: it belongs to the request, so the thread that closes a stream
(or runs ``asyncio.to_thread`` for an async view) may release it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal

from ..backends.base import Capability
from ..config import UNSET, Seconds, check_lock_ttl
from ..errors import BackendError, ConfigError
from ..kit import LockKit
from ..lock import Lock
from .outcome import GuardContext, Outcome, in_loop
from .problems import RequestKeyInvalid, RequestKeyMissing
from .request_key import KeyFunc, RequestKey, Source
from .settings import check_request_wait

__all__ = ["HTTP_METHODS", "RequestRule", "Scope"]

HTTP_METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)
Scope = Literal["global", "route"]


class RequestRule:
    """Lock requests on ``key``; ``wait`` seconds (default: the ``WAIT`` setting) before a
    busy lock answers 409. See :class:`~lockkit_core.guard.RequestKey` for templates."""

    def __init__(
        self,
        key: str | KeyFunc,
        *,
        sources: Mapping[str, Source],
        wait: Seconds = UNSET,
        ttl: Seconds = UNSET,
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
        if self.methods is not None and not self.methods:
            raise ConfigError(
                "methods=[] would never lock; leave methods out to lock every method, or "
                "name some, e.g. methods=['POST']"
            )
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

    def check_store(self, kit: LockKit, where: str) -> None:
        """A ConfigError naming ``where`` if this rule cannot lock on ``kit``'s store, so
        the app fails when it is set up rather than on every request (no I/O)."""
        if self.ttl is None and Capability.NO_LEASE not in kit.backend.capabilities:
            raise ConfigError(
                f"{where}: ttl=None (no lease) cannot be held on the "
                f"{kit.backend.url.scheme}:// store, which frees a lock only when its lease "
                "runs out; give a ttl (it is renewed while the request runs), or use "
                "memory:// or file://"
            )

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
        key = self.key_for(context, route, values)
        return key if isinstance(key, Outcome) else self.acquire(context, route, key)

    def key_for(
        self,
        context: GuardContext,
        route: str,
        values: Mapping[str, Any] | Callable[[KeyFunc], object],
    ) -> str | Outcome:
        """The request's lock key, or the 400 refusal for a value the client did not send
        (or one no key may hold: too long, a NUL).
        Reads the request's sources (a user, a session: maybe the database), no lock I/O."""
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
        return f"{route}:{key}" if self.scope == "route" else key

    def acquire(self, context: GuardContext, route: str, key: str) -> Outcome:
        """Try the lock on ``key``, waiting up to the rule's wait (lock I/O only)."""
        lock, wait = self._lock(context, key)
        try:
            acquired = lock.acquire(timeout=wait)
        except BackendError as exc:  # down, demoted, or any other store failure
            return self._failed(context, route, key, exc)
        return self._answer(context, route, lock, acquired)

    async def adecide(
        self,
        context: GuardContext,
        route: str,
        values: Mapping[str, Any] | Callable[[KeyFunc], object],
    ) -> Outcome:
        """:meth:`decide` from async code: the lock is awaited on the event loop
        (``Lock.aacquire``), no thread per request, on stores with an asyncio API; on the
        others the wait runs in a worker thread. The key is built here, on the loop."""
        key = self.key_for(context, route, values)
        return key if isinstance(key, Outcome) else await self.aacquire(context, route, key)

    async def aacquire(self, context: GuardContext, route: str, key: str) -> Outcome:
        """:meth:`acquire` from async code (see :meth:`adecide`)."""
        lock, wait = self._lock(context, key)
        try:
            acquired = await in_loop(
                lock,
                functools.partial(lock.aacquire, timeout=wait),
                functools.partial(lock.acquire, timeout=wait),
            )
        except BackendError as exc:
            return self._failed(context, route, key, exc)
        return self._answer(context, route, lock, acquired)

    def _lock(self, context: GuardContext, key: str) -> tuple[Lock, float | None]:
        wait = context.settings.wait if self.wait is UNSET else self.wait
        kit = context.kit
        made = context.lock_makers.get(self)
        # Made again for another kit or config (the options were checked against them).
        if made is None or made[0] is not kit or made[1] is not kit.config:
            template = self.key.template or getattr(self.key.func, "__qualname__", "callable")
            make = kit.lock_maker(ttl=self.ttl, reentrant=False, template=template)
            made = context.lock_makers[self] = (kit, kit.config, make)
        return made[2](key), wait

    def _failed(self, context: GuardContext, route: str, key: str, exc: BackendError) -> Outcome:
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
    def _answer(context: GuardContext, route: str, lock: Lock, acquired: bool) -> Outcome:
        if not acquired:
            context.counts.add("busy")
            context.log.info("%s refused (409): %r is held", route, lock.key)
            retry = context.settings.retry_after
            return Outcome(refusal=context.problems.busy(lock.key, route, retry), route=route)
        return Outcome(lock=lock, route=route, context=context)
