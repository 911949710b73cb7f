"""``@idempotent``: opt a view into ``Idempotency-Key`` handling; sync and async views alike.

::

    @require_POST
    @idempotent(required=True, expires=3600)
    def pay(request, order_id): ...

    @method_decorator(idempotent(), name="dispatch")
    class RefundView(View): ...

Options not given come from ``LOCKKIT['IDEMPOTENCY']`` (its ``PATHS`` are the middleware's
and do not matter here). Async views stay coroutine functions; the cache and lock round
trips run in Django's sync thread, never on the event loop.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar, cast, overload

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponseBase

from ..conf import lockkit_state
from .flow import Claim, begin, finish
from .settings import IdempotencySettings, ScopeFunc

__all__ = ["idempotent", "run_idempotent", "run_idempotent_async"]

V = TypeVar("V", bound=Callable[..., Any])
_Options = Callable[[], IdempotencySettings | None]


def run_idempotent(
    request: HttpRequest, options: _Options, call: Callable[[], HttpResponseBase]
) -> HttpResponseBase:
    """Run ``call`` at most once per scoped ``Idempotency-Key``; replay its response after."""
    decision = begin(request, options())
    if decision is None:
        return call()
    if not isinstance(decision, Claim):
        return decision
    try:
        response = call()
    except BaseException:
        finish(decision, None)
        raise
    finish(decision, response)
    return response


async def run_idempotent_async(
    request: HttpRequest, options: _Options, call: Callable[[], Awaitable[HttpResponseBase]]
) -> HttpResponseBase:
    """:func:`run_idempotent` for async views: store round trips run off the event loop."""
    decision = await sync_to_async(begin)(request, options())
    if decision is None:
        return await call()
    if not isinstance(decision, Claim):
        return decision
    try:
        response = await call()
    except BaseException:
        await sync_to_async(finish)(decision, None)
        raise
    await sync_to_async(finish)(decision, response)
    return response


@overload
def idempotent(view: V) -> V: ...
@overload
def idempotent(
    view: None = None,
    *,
    required: bool | None = None,
    methods: Iterable[str] | None = None,
    expires: int | None = None,
    cache: str | None = None,
    max_key_length: int | None = None,
    scope: ScopeFunc | str | None = None,
) -> Callable[[V], V]: ...
def idempotent(
    view: V | None = None,
    *,
    required: bool | None = None,
    methods: Iterable[str] | None = None,
    expires: int | None = None,
    cache: str | None = None,
    max_key_length: int | None = None,
    scope: ScopeFunc | str | None = None,
) -> V | Callable[[V], V]:
    """Handle the ``Idempotency-Key`` header for this view (``@idempotent`` or
    ``@idempotent(required=True)``).

    ``required``: a request without the header answers 400; ``methods``: the methods that
    honour the header (default POST, PATCH); ``expires``: seconds a response is replayed;
    ``cache``: the ``settings.CACHES`` alias it is kept in; ``max_key_length``; ``scope``: a
    callable ``(request) -> str`` naming anonymous callers. Bad options raise ConfigError here.
    """
    given: dict[str, Any] = {
        "required": required,
        "methods": methods,
        "expires": expires,
        "cache": cache,
        "max_key_length": max_key_length,
        "scope": scope,
    }
    IdempotencySettings().override(**given)  # fail at import, not at the first request

    def options() -> IdempotencySettings:
        return lockkit_state().settings.idempotency.override(**given)

    def decorate(view: V) -> V:
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def idempotent_async(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                return await run_idempotent_async(
                    request, options, lambda: view(request, *args, **kwargs)
                )

            return cast(V, idempotent_async)

        @functools.wraps(view)
        def idempotent_view(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            return run_idempotent(request, options, lambda: view(request, *args, **kwargs))

        return cast(V, idempotent_view)

    return decorate if view is None else decorate(view)
