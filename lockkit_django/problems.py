"""The errors a locked view can meet, and their RFC 9457 ``application/problem+json`` answers.

The request guard's own (:mod:`lockkit_core.guard`, shared with Flask)::

    LockUnavailable    -> RequestLocked       409, Retry-After: another request holds the key
    BackendUnavailable -> LockStoreDown       503, Retry-After: the store cannot be reached
    LockKitError       -> RequestKeyMissing   400: the request lacks a value of the key
    LockKitError       -> RequestKeyInvalid   400: the key it makes is too long, or holds NUL

and for ``Idempotency-Key`` requests (:mod:`lockkit_django.idempotency`)::

    RequestLocked      -> IdempotencyKeyInFlight  409, Retry-After: the first request still runs
    LockKitError       -> IdempotencyKeyInvalid   400: missing where required, or malformed
    LockKitError       -> IdempotencyKeyReused    422: the key was used for another payload
    LockStoreDown      -> IdempotencyStoreDown    503, Retry-After: its cache or lock store is down

Override the 409 with ``on_busy=`` (a callable ``(request, exc) -> HttpResponse``) on
``@lock_view``, ``lock_on_busy`` on ``LockViewMixin`` or ``"ON_BUSY"`` (a dotted path) on a
middleware rule.
"""

from __future__ import annotations

from django.http import HttpResponse, HttpResponseBase

from lockkit_core import LockKitError
from lockkit_core.guard import (
    PROBLEM_JSON,
    LockStoreDown,
    Problem,
    RequestKeyInvalid,
    RequestKeyMissing,
    RequestLocked,
)

__all__ = [
    "PROBLEM_JSON",
    "IdempotencyKeyInFlight",
    "IdempotencyKeyInvalid",
    "IdempotencyKeyReused",
    "IdempotencyStoreDown",
    "LockStoreDown",
    "RequestKeyInvalid",
    "RequestKeyMissing",
    "RequestLocked",
    "is_refusal",
    "mark_refusal",
    "problem_response",
]


class IdempotencyKeyInFlight(RequestLocked):
    """A request with the same ``Idempotency-Key`` is still running."""

    def __init__(self, key: str, retry_after: int) -> None:
        super().__init__(key, "this request", retry_after)
        self.detail = (
            "a request with this Idempotency-Key is still being processed; retry in "
            f"{retry_after} s to get its response"
        )
        self.args = (self.detail,)


class IdempotencyStoreDown(LockStoreDown):
    """The cache or the lock store that ``Idempotency-Key`` requests need cannot be reached."""

    def __init__(self, what: str, retry_after: int) -> None:
        super().__init__("idempotency", "this request", retry_after)
        self.detail = (
            f"this request has an Idempotency-Key and the {what} that keeps such requests "
            f"cannot be reached; retry in {retry_after} s"
        )
        self.args = (self.detail,)


class IdempotencyKeyInvalid(Problem, LockKitError):
    """The request's ``Idempotency-Key`` is missing where required, or malformed: a 400."""

    def __init__(self, detail: str, *, missing: bool = False) -> None:
        self.detail = detail
        self.missing = missing
        super().__init__(detail)


class IdempotencyKeyReused(Problem, LockKitError):
    """The ``Idempotency-Key`` was first used for another request payload: a 422."""

    status = 422
    title = "Unprocessable Content"

    def __init__(self) -> None:
        self.detail = (
            "this Idempotency-Key was already used for a different request (method, path, "
            "content type or body); use a new key for a new operation"
        )
        super().__init__(self.detail)


def mark_refusal(response: HttpResponseBase) -> HttpResponseBase:
    """Mark a response that refused a request before its view ran (busy, store down, bad
    input): an idempotency layer answers it but does not keep it for replay."""
    response.lockkit_refusal = True  # type: ignore[attr-defined]
    return response


def is_refusal(response: HttpResponseBase) -> bool:
    """Whether lockkit refused the request behind ``response`` (see :func:`mark_refusal`)."""
    return getattr(response, "lockkit_refusal", False) is True


def problem_response(exc: Problem) -> HttpResponse:
    """The ``application/problem+json`` answer the guard's ``exc`` carries."""
    response = HttpResponse(exc.body(), status=exc.status)
    for name, value in exc.headers():
        response[name] = value
    mark_refusal(response)
    return response
