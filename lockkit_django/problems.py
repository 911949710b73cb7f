"""The errors a locked view can meet, and their RFC 9457 ``application/problem+json`` answers.

::

    LockUnavailable    -> RequestLocked       409, Retry-After: another request holds the key
    BackendUnavailable -> LockStoreDown       503, Retry-After: the store cannot be reached
    LockKitError       -> RequestKeyMissing   400: the request lacks a value of the key

and for ``Idempotency-Key`` requests (:mod:`lockkit_django.idempotency`)::

    RequestLocked      -> IdempotencyKeyInFlight  409, Retry-After: the first request still runs
    LockKitError       -> IdempotencyKeyInvalid   400: missing where required, or malformed
    LockKitError       -> IdempotencyKeyReused    422: the key was used for another payload
    BackendUnavailable -> IdempotencyStoreDown    503, Retry-After: its cache or lock store is down

Override the 409 with ``on_busy=`` (a callable ``(request, exc) -> HttpResponse``) on
``@lock_view`` or ``"ON_BUSY"`` (a dotted path) on a middleware rule.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse, HttpResponseBase

from lockkit_core import BackendUnavailable, LockKitError, LockUnavailable

from .keys import RequestKeyMissing

__all__ = [
    "PROBLEM_JSON",
    "IdempotencyKeyInFlight",
    "IdempotencyKeyInvalid",
    "IdempotencyKeyReused",
    "IdempotencyStoreDown",
    "LockStoreDown",
    "RequestLocked",
    "is_refusal",
    "mark_refusal",
    "problem_response",
]

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


class IdempotencyKeyInFlight(RequestLocked):
    """A request with the same ``Idempotency-Key`` is still running."""

    def __init__(self, key: str, retry_after: int) -> None:
        self.retry_after = retry_after
        LockUnavailable.__init__(
            self,
            key,
            "a request with this Idempotency-Key is still being processed; retry in "
            f"{retry_after} s to get its response",
        )


class IdempotencyStoreDown(LockStoreDown):
    """The cache or the lock store that ``Idempotency-Key`` requests need cannot be reached."""

    def __init__(self, what: str, retry_after: int) -> None:
        self.key = "idempotency"
        self.retry_after = retry_after
        BackendUnavailable.__init__(
            self,
            f"this request has an Idempotency-Key and the {what} that keeps such requests "
            f"cannot be reached; retry in {retry_after} s",
        )


class IdempotencyKeyInvalid(LockKitError):
    """The request's ``Idempotency-Key`` is missing where required, or malformed: a 400."""

    def __init__(self, detail: str, *, missing: bool = False) -> None:
        self.missing = missing
        super().__init__(detail)


class IdempotencyKeyReused(LockKitError):
    """The ``Idempotency-Key`` was first used for another request payload: a 422."""

    def __init__(self) -> None:
        super().__init__(
            "this Idempotency-Key was already used for a different request (method, path, "
            "content type or body); use a new key for a new operation"
        )


_Problem = (
    RequestLocked | LockStoreDown | RequestKeyMissing | IdempotencyKeyInvalid | IdempotencyKeyReused
)


def mark_refusal(response: HttpResponseBase) -> HttpResponseBase:
    """Mark a response that refused a request before its view ran (busy, store down, bad
    input): an idempotency layer answers it but does not keep it for replay."""
    response.lockkit_refusal = True  # type: ignore[attr-defined]
    return response


def is_refusal(response: HttpResponseBase) -> bool:
    """Whether lockkit refused the request behind ``response`` (see :func:`mark_refusal`)."""
    return getattr(response, "lockkit_refusal", False) is True


def problem_response(exc: _Problem, **extra: Any) -> HttpResponse:
    """The ``application/problem+json`` answer for ``exc``."""
    if isinstance(exc, RequestLocked):
        status, title, retry = 409, "Conflict", exc.retry_after
        extra.setdefault("lock", exc.key)
    elif isinstance(exc, LockStoreDown):
        status, title, retry = 503, "Service Unavailable", exc.retry_after
    elif isinstance(exc, IdempotencyKeyReused):
        status, title, retry = 422, "Unprocessable Content", None
    else:
        status, title, retry = 400, "Bad Request", None
    body = {"type": "about:blank", "title": title, "status": status, "detail": str(exc), **extra}
    response = HttpResponse(
        json.dumps(body, sort_keys=True), status=status, content_type=PROBLEM_JSON
    )
    if retry is not None:
        response["Retry-After"] = str(retry)
    mark_refusal(response)
    return response
