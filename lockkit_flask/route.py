"""``@lock_route``: run a view under a lock named from its request; ``lock_blueprint``: the
same for every view of a blueprint. Every decision is the core guard's
(:mod:`lockkit_core.guard`); this module supplies Flask's request and answers.

``@lock_route`` works written under ``@app.route`` (it wraps the view) and above it: the
route was then registered with the bare view, and the view is swapped for its wrapper in
``app.view_functions`` (see :class:`ViewFunctions`), so both orders run the same code and a
request pays nothing for the check. The lock covers the whole response: it is released when
the view returns or raises or, for a streamed response, when the stream is closed
(``Response.call_on_close``). The view finds it in ``g.lockkit_lock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import warnings
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from flask import Blueprint, Response, current_app, g, request
from flask.typing import ResponseReturnValue

from lockkit_core.config import UNSET
from lockkit_core.guard import NOT_LOCKED, Outcome, RequestRule, Scope

from .errors import RequestLocked
from .extension import state_of
from .sources import ALL_SOURCES, Values, check_template

__all__ = ["OnBusy", "ViewFunctions", "lock_blueprint", "lock_route"]

F = TypeVar("F", bound=Callable[..., Any])
OnBusy = Callable[[Any, RequestLocked], ResponseReturnValue]
_OUTCOMES = "_lockkit_outcomes"

#: The attribute of a bare view that holds the wrapper ``@lock_route`` made of it (on the
#: function, not in a weak map: the wrapper refers to the view, which would keep it alive).
_WRAPPER = "__lockkit_wrapper__"
#: Where each bare view is registered: an app's view functions and the endpoint.
_registered: weakref.WeakKeyDictionary[
    Callable[..., Any], list[tuple[weakref.ref[ViewFunctions], str]]
] = weakref.WeakKeyDictionary()


class ViewFunctions(dict[str, Callable[..., Any]]):
    """``app.view_functions`` of an app with the extension: a view ``@lock_route`` has
    decorated is registered as its wrapper, and a view registered before ``@lock_route``
    decorated it (the decorator written above ``@app.route``) is swapped for the wrapper
    then. Either way the route is locked, and no request pays for the check."""

    def __setitem__(self, endpoint: str, view: Callable[..., Any]) -> None:
        wrapper = getattr(view, _WRAPPER, None)
        if wrapper is None:
            # A view that takes no weak reference (a builtin) is never one of ours.
            with contextlib.suppress(TypeError):
                _registered.setdefault(view, []).append((weakref.ref(self), endpoint))
        super().__setitem__(endpoint, view if wrapper is None else wrapper)

    def adopt(self) -> None:
        """Swap every view already registered that ``@lock_route`` has decorated."""
        for endpoint, view in list(self.items()):
            self[endpoint] = view


def _swap_registered(view: Callable[..., Any], wrapper: Callable[..., Any]) -> None:
    try:
        setattr(view, _WRAPPER, wrapper)
    except AttributeError:  # a callable object without a __dict__: registered by hand
        return
    for ref, endpoint in _registered.pop(view, []):
        views = ref()
        if views is not None and views.get(endpoint) is view:
            dict.__setitem__(views, endpoint, wrapper)


def _on_busy(on_busy: Callable[..., Any] | None) -> OnBusy | None:
    """``on_busy(request, exc)``, as in Django; a one-argument ``on_busy(exc)`` is the
    former signature, still called (with a DeprecationWarning)."""
    if on_busy is None or not callable(on_busy):
        return on_busy
    try:
        params = inspect.signature(on_busy).parameters.values()
    except (TypeError, ValueError):
        return on_busy
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) == 1 and not any(p.kind is p.VAR_POSITIONAL for p in params):
        warnings.warn(
            "on_busy(exc) is deprecated: take (request, exc), as lockkit_django does",
            DeprecationWarning,
            stacklevel=4,
        )
        return lambda _request, exc: on_busy(exc)
    return on_busy


def _rule(key: Any, on_busy: Callable[..., Any] | None, **options: Any) -> RequestRule:
    rule = RequestRule(key, sources=ALL_SOURCES, on_busy=_on_busy(on_busy), **options)
    check_template(rule.key)
    return rule


def decide(rule: RequestRule) -> Outcome:
    """The guard's outcome for the current request (may wait for the lock)."""
    state = state_of(current_app)
    if not rule.applies(state, request.method):
        return NOT_LOCKED
    route = request.endpoint or request.path
    if rule.key.func is not None:
        return rule.decide(state, route, lambda func: func())
    return rule.decide(state, route, Values(request.view_args or {}))


def refuse(rule: RequestRule, outcome: Outcome) -> ResponseReturnValue:
    """Answer a refused request: ``on_busy`` for a busy lock, else raise the HTTP error (so
    ``@app.errorhandler`` may answer it)."""
    refusal = outcome.refusal
    if isinstance(refusal, RequestLocked) and rule.on_busy is not None:
        rv: ResponseReturnValue = rule.on_busy(request, refusal)
        return rv
    assert isinstance(refusal, Exception)
    raise refusal


def hand_over(outcome: Outcome, response: Response) -> Response:
    """Release now, or when a streamed response is closed."""
    if outcome.lock is not None:
        if response.is_streamed:
            response.call_on_close(outcome.release)
        else:
            outcome.release()
    return response


def _wrap(rule: RequestRule, view: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(view):

        @functools.wraps(view)
        async def locked_async_view(*args: Any, **kwargs: Any) -> Any:
            # The wait happens in a worker thread (with this context): the loop runs on.
            outcome = await asyncio.to_thread(decide, rule)
            if outcome.refusal is not None:
                return refuse(rule, outcome)
            g.lockkit_lock = outcome.lock  # .token fences writes; None: not locked
            try:
                response = current_app.make_response(await view(*args, **kwargs))
            except BaseException:
                await asyncio.to_thread(outcome.release)
                raise
            if not response.is_streamed:
                await asyncio.to_thread(outcome.release)
            return hand_over(outcome, response)

        return locked_async_view

    @functools.wraps(view)
    def locked_view(*args: Any, **kwargs: Any) -> Any:
        outcome = decide(rule)
        if outcome.refusal is not None:
            return refuse(rule, outcome)
        g.lockkit_lock = outcome.lock  # .token fences writes; None: not locked
        try:
            response = current_app.make_response(view(*args, **kwargs))
        except BaseException:
            outcome.release()
            raise
        return hand_over(outcome, response)

    return locked_view


def lock_route(
    key: str | Callable[[], str],
    *,
    wait: Any = UNSET,
    ttl: Any = UNSET,
    methods: Iterable[str] | None = None,
    on_busy: OnBusy | None = None,
    scope: Scope = "global",
    fail_open: bool = False,
) -> Callable[[F], F]:
    """Run the view under a lock; write it under or above ``@app.route`` (or on a
    MethodView method, or in its ``decorators``).

    ``key`` is a template (``"seat:{event_id}:{query[row]}"``, see
    :mod:`lockkit_flask.sources`) or a function of no arguments. ``wait`` seconds (default
    ``LOCKKIT_WAIT``, 0) before a busy lock answers 409 (:class:`RequestLocked`), or
    ``on_busy(request, exc)`` answers instead; ``ttl`` defaults to the kit's. ``methods``
    limits which HTTP methods lock. ``scope="global"`` (the default) locks the key as
    written; ``"route"`` prefixes it with the endpoint. A store that is down answers 503
    unless ``fail_open=True``.
    """
    rule = _rule(
        key, on_busy, wait=wait, ttl=ttl, methods=methods, scope=scope, fail_open=fail_open
    )

    def decorate(view: F) -> F:
        rule.key.check_view(view)
        wrapper = _wrap(rule, view)
        _swap_registered(view, wrapper)
        return cast(F, wrapper)

    return decorate


def _enter_hook(rule: RequestRule) -> ResponseReturnValue | None:
    """A blueprint's ``before_request``: take the lock, or answer the refusal."""
    outcome = decide(rule)
    if outcome.refusal is not None:
        return refuse(rule, outcome)
    g.lockkit_lock = outcome.lock
    if outcome.lock is not None:
        g.setdefault(_OUTCOMES, []).append(outcome)
    return None


def _leave_hook(response: Response) -> Response:
    """A blueprint's ``after_request``: its locks end with the response (or its stream)."""
    for outcome in g.pop(_OUTCOMES, []):
        hand_over(outcome, response)
    return response


def _teardown_hook(_exc: BaseException | None) -> None:
    """A view that raised never reached ``after_request``: release here."""
    for outcome in g.pop(_OUTCOMES, []):
        outcome.release()


def lock_blueprint(
    blueprint: Blueprint,
    key: str | Callable[[], str],
    *,
    wait: Any = UNSET,
    ttl: Any = UNSET,
    methods: Iterable[str] | None = None,
    on_busy: OnBusy | None = None,
    scope: Scope = "global",
    fail_open: bool = False,
) -> RequestRule:
    """Lock every request the blueprint serves, as ``@lock_route`` would. Template fields
    that name view arguments are checked per request (400/500 naming route and value)."""
    rule = _rule(
        key, on_busy, wait=wait, ttl=ttl, methods=methods, scope=scope, fail_open=fail_open
    )
    blueprint.before_request(functools.partial(_enter_hook, rule))
    blueprint.after_request(_leave_hook)
    blueprint.teardown_request(_teardown_hook)
    return rule
