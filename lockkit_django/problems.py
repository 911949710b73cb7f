"""The errors a locked view can meet, and their RFC 9457 ``application/problem+json`` answers.

::

    LockUnavailable    -> RequestLocked       409, Retry-After: another request holds the key
    BackendUnavailable -> LockStoreDown       503, Retry-After: the store cannot be reached
    LockKitError       -> RequestKeyMissing   400: the request lacks a value of the key

Override the 409 with ``on_busy=`` (a callable ``(request, exc) -> HttpResponse``) on
``@lock_view`` or ``"ON_BUSY"`` (a dotted path) on a middleware rule.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse

from lockkit_core import BackendUnavailable, LockUnavailable

from .keys import RequestKeyMissing

__all__ = ["PROBLEM_JSON", "LockStoreDown", "RequestLocked", "problem_response"]

PROBLEM_JSON = "application/problem+json"


class RequestLocked(LockUnavailable):
    """Another request holds this request's lock."""

    def __init__(self, key: str, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(key, f"another request holds the lock {key!r}; retry in {retry_after} s")


class LockStoreDown(BackendUnavailable):
    """The lock store cannot be reached, so the request is refused rather than run unlocked."""

    def __init__(self, key: str, retry_after: int) -> None:
        self.key = key
        self.retry_after = retry_after
        super().__init__(
            f"this request needs the lock {key!r} and the lock store cannot be reached; "
            f"retry in {retry_after} s"
        )


def problem_response(
    exc: RequestLocked | LockStoreDown | RequestKeyMissing, **extra: Any
) -> HttpResponse:
    """The ``application/problem+json`` answer for ``exc``."""
    if isinstance(exc, RequestLocked):
        status, title, retry = 409, "Conflict", exc.retry_after
        extra.setdefault("lock", exc.key)
    elif isinstance(exc, LockStoreDown):
        status, title, retry = 503, "Service Unavailable", exc.retry_after
    else:
        status, title, retry = 400, "Bad Request", None
    body = {"type": "about:blank", "title": title, "status": status, "detail": str(exc), **extra}
    response = HttpResponse(
        json.dumps(body, sort_keys=True), status=status, content_type=PROBLEM_JSON
    )
    if retry is not None:
        response["Retry-After"] = str(retry)
    return response
