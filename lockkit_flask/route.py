"""``@lock_route``: run a view under a lock named from its request; ``lock_blueprint``: the
same for every view of a blueprint.

The lock covers the whole response: it is released when the view returns, when it raises,
or, for a streamed response, when the stream is closed (``Response.call_on_close``). Locks
are ``reentrant=False``: they belong to the request, so whichever thread closes the stream
(or runs ``asyncio.to_thread``) may release them.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

from flask import Blueprint, Response, current_app, g, request
from flask.typing import ResponseReturnValue

from lockkit_core import BackendUnavailable, ConfigError, Lock, LockNotOwned
from lockkit_core.config import UNSET, check_timeout, check_ttl

from .errors import LockStoreUnavailable, RouteLocked
from .extension import LockKitState, state_of
from .keys import RouteKey

__all__ = ["OnBusy", "RouteRule", "lock_blueprint", "lock_route"]

log = logging.getLogger("lockkit.flask")

F = TypeVar("F", bound=Callable[..., Any])
OnBusy = Callable[[RouteLocked], ResponseReturnValue]
_HTTP_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}


@dataclass
class _Attempt:
    lock: Lock
    route: str
    state: LockKitState
    wait: float | None


class RouteRule:
    """One ``@lock_route`` (or ``lock_blueprint``): which requests lock, on what, how long."""

    def __init__(
        self,
        key: str | Callable[[], str],
        *,
        wait: Any = UNSET,
        ttl: Any = UNSET,
        methods: Iterable[str] | None = None,
        on_busy: OnBusy | None = None,
        scope: Literal["route", "global"] = "route",
        fail_open: bool = False,
    ) -> None:
        self.key = RouteKey(key)
        self.wait = UNSET if wait is UNSET else check_timeout(wait, "wait")
        self.ttl = UNSET if ttl is UNSET or ttl is None else check_ttl(ttl)
        if isinstance(methods, str):
            raise ConfigError(f"methods must be a list such as [{methods!r}], not a string")
        self.methods = None if methods is None else frozenset(m.upper() for m in methods)
        if self.methods is not None and "GET" in self.methods:
            self.methods |= {"HEAD"}  # Flask answers HEAD with the GET view
        if self.methods is not None and not self.methods <= _HTTP_METHODS:
            raise ConfigError(
                f"methods {sorted(self.methods - _HTTP_METHODS)} are not HTTP methods; "
                f"use some of {sorted(_HTTP_METHODS)}"
            )
        if on_busy is not None and not callable(on_busy):
            raise ConfigError(f"on_busy must be a callable taking the RouteLocked, got {on_busy!r}")
        self.on_busy = on_busy
        if scope not in ("route", "global"):
            raise ConfigError(
                f"scope must be 'route' (keys are per endpoint) or 'global' (shared with "
                f"every route using the same key), got {scope!r}"
            )
        self.scope = scope
        if not isinstance(fail_open, bool):
            raise ConfigError(f"fail_open must be True or False, got {fail_open!r}")
        self.fail_open = fail_open

    def plan(self) -> _Attempt | None:
        """The lock this request needs (no I/O), or None if it needs none."""
        state = state_of(current_app)
        if not state.enabled or (self.methods is not None and request.method not in self.methods):
            return None
        route = request.endpoint or request.path
        key = self.key.render(route)
        if self.scope == "route":
            key = f"{route}:{key}"
        wait = state.wait if self.wait is UNSET else self.wait
        lock = state.kit.lock(key, ttl=self.ttl, timeout=wait, reentrant=False)
        return _Attempt(lock, route, state, wait)

    def take(self, attempt: _Attempt) -> bool:
        """Acquire, waiting up to the route's wait. True if held; False if the store is down
        and the route fails open. Raises RouteLocked or LockStoreUnavailable."""
        state = attempt.state
        try:
            acquired = attempt.lock.acquire(timeout=attempt.wait)
        except BackendUnavailable as exc:
            if self.fail_open:
                state.count("fail_open")
                log.warning(
                    "%s runs WITHOUT its lock %r: the lock store is down and the route "
                    "fails open (%s)",
                    attempt.route,
                    attempt.lock.key,
                    exc,
                )
                return False
            state.count("unavailable")
            log.error("%s refused (503): lock store down: %s", attempt.route, exc)
            raise LockStoreUnavailable(attempt.route, state.retry_after) from exc
        if not acquired:
            state.count("busy")
            log.info("%s refused (409): %r is held", attempt.route, attempt.lock.key)
            raise RouteLocked(attempt.lock.key, attempt.route, state.retry_after)
        return True

    def release(self, lock: Lock, *, quiet: bool) -> None:
        """Release; a lease lost meanwhile is logged, and raised unless ``quiet``."""
        try:
            lock.release()
        except LockNotOwned as exc:
            log.error("lock %r was lost while its request ran: %s", lock.key, exc)
            if not quiet:
                raise

    def hand_over(self, lock: Lock, rv: ResponseReturnValue) -> Response:
        """Release now, or when the stream closes if the response is streamed."""
        response = current_app.make_response(rv)
        if response.is_streamed:
            response.call_on_close(lambda: self.release(lock, quiet=True))
        else:
            self.release(lock, quiet=False)
        return response

    def busy(self, exc: RouteLocked) -> ResponseReturnValue:
        if self.on_busy is None:
            raise exc
        return self.on_busy(exc)


def _wrap_sync(rule: RouteRule, view: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(view)
    def locked_view(*args: Any, **kwargs: Any) -> Any:
        attempt = rule.plan()
        try:
            held = attempt is not None and rule.take(attempt)
        except RouteLocked as exc:
            return rule.busy(exc)
        if not held:
            return view(*args, **kwargs)
        assert attempt is not None
        try:
            rv = view(*args, **kwargs)
            response = current_app.make_response(rv)
        except BaseException:
            rule.release(attempt.lock, quiet=True)
            raise
        return rule.hand_over(attempt.lock, response)

    return locked_view


def _wrap_async(rule: RouteRule, view: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(view)
    async def locked_view(*args: Any, **kwargs: Any) -> Any:
        attempt = rule.plan()
        try:
            # Waiting happens in a worker thread: the event loop keeps running meanwhile.
            held = attempt is not None and await asyncio.to_thread(rule.take, attempt)
        except RouteLocked as exc:
            return rule.busy(exc)
        if not held:
            return await view(*args, **kwargs)
        assert attempt is not None
        try:
            rv = await view(*args, **kwargs)
            response = current_app.make_response(rv)
        except BaseException:
            await asyncio.to_thread(rule.release, attempt.lock, quiet=True)
            raise
        if response.is_streamed:
            return rule.hand_over(attempt.lock, response)
        await asyncio.to_thread(rule.release, attempt.lock, quiet=False)
        return response

    return locked_view


def lock_route(
    key: str | Callable[[], str],
    *,
    wait: Any = UNSET,
    ttl: Any = None,
    methods: Iterable[str] | None = None,
    on_busy: OnBusy | None = None,
    scope: Literal["route", "global"] = "route",
    fail_open: bool = False,
) -> Callable[[F], F]:
    """Run the view under a lock; place it under ``@app.route`` (or on a MethodView method,
    or in its ``decorators``).

    ``key`` is a template (``"seat:{event_id}:{args[row]}"``, see :mod:`lockkit_flask.keys`)
    or a function of no arguments. ``wait`` seconds (default ``LOCKKIT_WAIT``, 0) before a
    busy lock answers 409 (:class:`RouteLocked`), or ``on_busy(exc)`` answers instead;
    ``ttl`` defaults to the kit's. ``methods`` limits which HTTP methods lock. With
    ``scope="route"`` the key is prefixed by the endpoint; ``"global"`` shares it with
    other routes. A store that is down answers 503 unless ``fail_open=True``.
    """
    rule = RouteRule(
        key,
        wait=wait,
        ttl=ttl,
        methods=methods,
        on_busy=on_busy,
        scope=scope,
        fail_open=fail_open,
    )

    def decorate(view: F) -> F:
        rule.key.check_view(view)
        wrap = _wrap_async if inspect.iscoroutinefunction(view) else _wrap_sync
        return cast(F, wrap(rule, view))

    return decorate


def lock_blueprint(
    blueprint: Blueprint,
    key: str | Callable[[], str],
    *,
    wait: Any = UNSET,
    ttl: Any = None,
    methods: Iterable[str] | None = None,
    on_busy: OnBusy | None = None,
    scope: Literal["route", "global"] = "route",
    fail_open: bool = False,
) -> RouteRule:
    """Lock every request the blueprint serves, as ``@lock_route`` would. Template fields
    that name view arguments are checked per request (400/500 naming route and value)."""
    rule = RouteRule(
        key,
        wait=wait,
        ttl=ttl,
        methods=methods,
        on_busy=on_busy,
        scope=scope,
        fail_open=fail_open,
    )
    slot = f"_lockkit_{blueprint.name}"

    @blueprint.before_request
    def acquire_blueprint_lock() -> ResponseReturnValue | None:
        attempt = rule.plan()
        try:
            if attempt is not None and rule.take(attempt):
                setattr(g, slot, attempt.lock)
        except RouteLocked as exc:
            return rule.busy(exc)
        return None

    @blueprint.after_request
    def keep_lock_for_stream(response: Response) -> Response:
        lock: Lock | None = g.pop(slot, None)
        if lock is not None:
            if response.is_streamed:
                response.call_on_close(lambda: rule.release(lock, quiet=True))
            else:
                rule.release(lock, quiet=False)
        return response

    @blueprint.teardown_request
    def release_blueprint_lock(exc: BaseException | None) -> None:
        lock: Lock | None = g.pop(slot, None)
        if lock is not None:  # the view raised before after_request ran
            rule.release(lock, quiet=True)

    return rule
