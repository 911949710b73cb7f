"""``LockMiddleware``: lock requests by path, from ``LOCKKIT['MIDDLEWARE']['RULES']``.

::

    MIDDLEWARE = [..., "lockkit_django.middleware.LockMiddleware"]   # after auth and sessions
    LOCKKIT = {"MIDDLEWARE": {"RULES": [{
        "PATH": r"^/orders/(?P<order_id>\\d+)/pay/$",    # searched in request.path_info
        "METHODS": ["POST"],                               # optional: every method
        "KEY": "order:{order_id}",                         # or "callable:myapp.keys.order"
        "WAIT": 0, "TTL": 30, "FAIL_OPEN": False,          # optional
        "ON_BUSY": "myapp.views.busy",                     # optional (request, exc) -> response
    }]}}

The first rule whose ``PATH`` and ``METHODS`` match locks the request; its named groups are
the URL arguments of ``KEY``. The lock covers the view, any inner middleware and the
response (a stream until it is closed); under ``ATOMIC_REQUESTS`` the view's transaction has
committed before the middleware releases. Sync and async capable.

``IdempotencyMiddleware`` replays responses to retried ``Idempotency-Key`` requests on the
paths of ``LOCKKIT['IDEMPOTENCY']['PATHS']`` (see :mod:`lockkit_django.idempotency`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from .conf import lockkit_state
from .idempotency.views import run_idempotent, run_idempotent_async
from .rules import PathRule
from .views import run_locked, run_locked_async

__all__ = ["IdempotencyMiddleware", "LockMiddleware"]

_GetResponse = Callable[[HttpRequest], Any]


class LockMiddleware:
    """Run each request that a rule matches under that rule's lock."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: _GetResponse) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        found = self._match(request)
        if found is None:
            return self.get_response(request)
        rule, url_kwargs = found
        return run_locked(rule, request, url_kwargs, lambda: self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        found = self._match(request)
        if found is None:
            response: HttpResponseBase = await self.get_response(request)
            return response
        rule, url_kwargs = found
        call: Callable[[], Awaitable[HttpResponseBase]] = lambda: self.get_response(request)  # noqa: E731
        return await run_locked_async(rule, request, url_kwargs, call)

    @staticmethod
    def _match(request: HttpRequest) -> tuple[PathRule, dict[str, Any]] | None:
        for rule in lockkit_state().settings.rules:
            url_kwargs = rule.match(request)
            if url_kwargs is not None:
                return rule, url_kwargs
        return None


class IdempotencyMiddleware:
    """Handle ``Idempotency-Key`` on the requests ``LOCKKIT['IDEMPOTENCY']['PATHS']`` and
    ``['METHODS']`` name (see :mod:`lockkit_django.idempotency`).

    Put it after the session and authentication middleware (a key is scoped by its user or
    session) and before ``LockMiddleware``. Sync and async capable.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: _GetResponse) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        if not _handles(request):
            return self.get_response(request)
        return run_idempotent(request, _no_overrides, lambda: self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        if not _handles(request):
            response: HttpResponseBase = await self.get_response(request)
            return response
        call: Callable[[], Awaitable[HttpResponseBase]] = lambda: self.get_response(request)  # noqa: E731
        return await run_idempotent_async(request, _no_overrides, call)


def _handles(request: HttpRequest) -> bool:
    return lockkit_state().settings.idempotency.matches(request)


def _no_overrides() -> None:
    return None
