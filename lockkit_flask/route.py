"""``@lock_route``: run a view under a lock named from its request; ``lock_blueprint``: the
same for every view of a blueprint. Every decision is the core guard's
(:mod:`lockkit_core.guard`); this module supplies Flask's request and answers.

``@lock_route`` works written under ``@app.route`` (it wraps the view) and above it: the
route was then registered with the bare view, and the extension's ``app.view_functions``
(see :class:`ViewFunctions`) finds the wrapper when a request looks the view up, so both
orders run the same code. The lock covers the whole response: it is released when the
view raises, when the request's final response is finished or, for a streamed one, when the
stream is closed (see :mod:`lockkit_flask.release`). The view finds it in ``g.lockkit_lock``.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar, cast

from flask import Blueprint, Flask, Request, Response, current_app, g, request
from flask.sansio.blueprints import BlueprintSetupState
from flask.typing import ResponseReturnValue

from lockkit_core import Lock
from lockkit_core.config import UNSET, Seconds
from lockkit_core.guard import GuardContext, Outcome, Problem, RequestRule, Scope
from lockkit_core.guard.run import Hooks, Values, arun, begin, run

from .errors import RequestLocked
from .extension import EXTENSION_KEY, LockKitState, state_of
from .release import hold_until_finished
from .sources import ALL_SOURCES, check_template
from .sources import Values as FlaskValues
from .view_functions import BLUEPRINT_RULES, ViewFunctions, attach

__all__ = ["OnBusy", "ViewFunctions", "lock_blueprint", "lock_route"]

F = TypeVar("F", bound=Callable[..., Any])
OnBusy = Callable[[Any, RequestLocked], ResponseReturnValue]


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


def _values(rule: RequestRule) -> Callable[[Request], Values]:
    """How a request gives ``rule``'s key its values, decided once per rule."""
    if rule.key.func is not None:
        return lambda _request: lambda func: func()
    if rule.key.url_only:
        # URL arguments only: the request's view_args themselves, no lookup object.
        return lambda req: req.view_args or {}
    return lambda req: FlaskValues(req.view_args or {})


def _refuse(problem: Problem, answer: Any) -> ResponseReturnValue:
    """``on_busy``'s answer, or the HTTP error raised (so ``@app.errorhandler`` may answer)."""
    if answer is not None:
        rv: ResponseReturnValue = answer
        return rv
    assert isinstance(problem, Exception)
    raise problem


def _expose(lock: Lock | None) -> None:
    # .token fences writes; None: not locked. Set on g itself: through the proxy, setting an
    # attribute costs several times more.
    g._get_current_object().lockkit_lock = lock


HOOKS: Final = Hooks[Any](refuse=_refuse, expose=_expose, attach=hold_until_finished)


def _guard(rule: RequestRule, view: Callable[..., Any]) -> Callable[..., Any]:
    # Everything that is the same for every request is decided here, once; a request reads
    # the request and app objects once each (not through their proxies at every use).
    values = _values(rule)

    def context() -> tuple[Request, Flask, LockKitState]:
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        state = app.extensions.get(EXTENSION_KEY)
        if not isinstance(state, LockKitState):
            state = state_of(app)  # raises: the extension is not set up on this app
        return request._get_current_object(), app, state  # type: ignore[attr-defined]

    if inspect.iscoroutinefunction(view):

        @functools.wraps(view)
        async def locked_async_view(*args: Any, **kwargs: Any) -> Any:
            req, app, state = context()

            async def call() -> Response:
                return app.make_response(await view(*args, **kwargs))

            route = req.endpoint or req.path
            return await arun(rule, state, req, route, values(req), call, HOOKS)

        return locked_async_view

    @functools.wraps(view)
    def locked_view(*args: Any, **kwargs: Any) -> Any:
        req, app, state = context()

        def call() -> Response:
            return app.make_response(view(*args, **kwargs))

        return run(rule, state, req, req.endpoint or req.path, values(req), call, HOOKS)

    return locked_view


def lock_route(
    key: str | Callable[[], str],
    *,
    wait: Seconds = UNSET,
    ttl: Seconds = UNSET,
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
        wrapper = _guard(rule, view)
        attach(view, wrapper, rule)
        return cast(F, wrapper)

    return decorate


def _enter_hook(rule: RequestRule) -> ResponseReturnValue | None:
    """A blueprint's ``before_request``: take the lock (released as the request finishes),
    or answer the refusal."""
    req = request._get_current_object()  # type: ignore[attr-defined]
    route = req.endpoint or req.path
    outcome = begin(rule, state_of(current_app), req, route, _values(rule)(req), HOOKS)
    if not isinstance(outcome, Outcome):
        return outcome  # type: ignore[no-any-return]
    if outcome.lock is not None:
        hold_until_finished(None, outcome)
    return None


def _check_registered(rule: RequestRule, setup: BlueprintSetupState) -> None:
    state = setup.app.extensions.get(EXTENSION_KEY)
    if isinstance(state, GuardContext):
        rule.check_store(state.kit, f"blueprint {setup.blueprint.name!r}")


def lock_blueprint(
    blueprint: Blueprint,
    key: str | Callable[[], str],
    *,
    wait: Seconds = UNSET,
    ttl: Seconds = UNSET,
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
    # Checked against each app's store as the blueprint is registered (or, registered
    # before the extension, when the extension is set up).
    blueprint.__dict__.setdefault(BLUEPRINT_RULES, []).append(rule)
    blueprint.record(functools.partial(_check_registered, rule))
    blueprint.before_request(functools.partial(_enter_hook, rule))
    return rule
