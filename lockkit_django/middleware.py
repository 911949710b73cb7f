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

import functools
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest

from .conf import lockkit_state
from .idempotency.views import run_idempotent, run_idempotent_async
from .path_rules import PathRule
from .views import arun_locked, run_locked

__all__ = ["IdempotencyMiddleware", "LockMiddleware"]

_GetResponse = Callable[[HttpRequest], Any]


class _Middleware:
    """A sync-and-async middleware: ``wrap`` says how one request runs (or None: as is)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: _GetResponse) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        answer = self.wrap(request)
        return self.get_response(request) if answer is None else answer

    def wrap(self, request: HttpRequest) -> Any:
        """The response (or, async, its coroutine), or None to pass the request on as is."""
        raise NotImplementedError


class LockMiddleware(_Middleware):
    """Run each request that a rule matches under that rule's lock."""

    def wrap(self, request: HttpRequest) -> Any:
        state = lockkit_state()
        found = _match(request, state.settings.rules)
        if found is None:
            return None
        rule, url_kwargs = found
        run = arun_locked if self.is_async else run_locked
        call = functools.partial(self.get_response, request)
        return run(rule, request, url_kwargs, call, rule.path.pattern, state.guard)


def _match(
    request: HttpRequest, rules: tuple[PathRule, ...]
) -> tuple[PathRule, dict[str, Any]] | None:
    for rule in rules:
        if rule.methods is None or request.method in rule.methods:
            url_kwargs = rule.match(request)
            if url_kwargs is not None:
                return rule, url_kwargs
    return None


class IdempotencyMiddleware(_Middleware):
    """Handle ``Idempotency-Key`` on the requests ``LOCKKIT['IDEMPOTENCY']['PATHS']`` and
    ``['METHODS']`` name (see :mod:`lockkit_django.idempotency`).

    Put it after the session and authentication middleware (a key is scoped by its user or
    session) and before ``LockMiddleware``. Sync and async capable.
    """

    def wrap(self, request: HttpRequest) -> Any:
        if not lockkit_state().settings.idempotency.matches(request):
            return None
        run = run_idempotent_async if self.is_async else run_idempotent
        return run(request, _no_overrides, functools.partial(self.get_response, request))


def _no_overrides() -> None:
    return None
