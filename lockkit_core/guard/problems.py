"""The refusals a request guard answers with, each an RFC 9457 ``application/problem+json``.

::

    LockUnavailable    -> RequestLocked       409, Retry-After: another request holds the key
    BackendUnavailable -> LockStoreDown       503, Retry-After: the store cannot be reached
    LockKitError       -> RequestKeyMissing   400: the request lacks a value of the key
    LockKitError       -> RequestKeyInvalid   400: the key it makes is too long, or holds NUL

Each carries its answer (``status``, :meth:`Problem.headers`, :meth:`Problem.body`), so an
adapter only copies it into its framework's response. Flask's classes also subclass werkzeug's
HTTP exceptions; Django uses these as they are.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Final

from ..errors import BackendUnavailable, LockKitError, LockUnavailable

__all__ = [
    "PROBLEM_JSON",
    "LockStoreDown",
    "Problem",
    "RequestKeyInvalid",
    "RequestKeyMissing",
    "RequestLocked",
]

PROBLEM_JSON: Final = "application/problem+json"


class Problem:
    """What a refusal answers: mixed into a lockkit error that is also the answer."""

    status: ClassVar[int] = 400
    title: ClassVar[str] = "Bad Request"
    retry_after: int | None = None
    detail: str = ""

    def problem(self) -> dict[str, Any]:
        """The problem document; subclasses add their own members."""
        return {"type": "about:blank", "title": self.title, "status": self.status,
                "detail": self.detail}  # fmt: skip

    def headers(self) -> list[tuple[str, str]]:
        """``Content-Type`` and, for a refusal worth retrying, ``Retry-After``."""
        headers = [("Content-Type", PROBLEM_JSON)]
        if self.retry_after is not None:
            headers.append(("Retry-After", str(self.retry_after)))
        return headers

    def body(self) -> str:
        """The JSON text of :meth:`problem`."""
        return json.dumps(self.problem(), sort_keys=True)


class RequestLocked(Problem, LockUnavailable):
    """Another request holds this request's lock: 409 with ``Retry-After``."""

    status = 409
    title = "Conflict"

    def __init__(self, key: str, route: str, retry_after: int) -> None:
        self.detail = (
            f"{route} is busy: another request holds the lock {key!r}; retry in {retry_after} s"
        )
        super().__init__(key, self.detail)
        # After super(): werkzeug's ServiceUnavailable (a base of Flask's classes) resets it.
        self.route = route
        self.retry_after = retry_after

    def problem(self) -> dict[str, Any]:
        return {**super().problem(), "lock": self.key, "route": self.route}


class LockStoreDown(Problem, BackendUnavailable):
    """The lock store cannot be reached, so the request is refused rather than run unlocked."""

    status = 503
    title = "Service Unavailable"

    def __init__(self, key: str, route: str, retry_after: int) -> None:
        self.detail = (
            f"{route} needs the lock {key!r} and the lock store cannot be reached; "
            f"retry in {retry_after} s"
        )
        super().__init__(self.detail)
        self.key = key
        self.route = route
        self.retry_after = retry_after


class RequestKeyMissing(Problem, LockKitError):
    """The request lacks a value its lock key is built from: 400."""

    def __init__(self, route: str, field: str, what: str) -> None:
        self.detail = (
            f"{route} locks on a key built from {what}, which this request did not send "
            f"(key field {{{field}}})"
        )
        super().__init__(self.detail)
        self.route = route
        self.field = field


class RequestKeyInvalid(Problem, LockKitError):
    """The lock key built from the request's values is unusable (too long, or holding a NUL):
    a 400. The detail never repeats the key: it may be a megabyte long."""

    def __init__(self, route: str, reason: str) -> None:
        self.detail = f"{route} locks on a key built from this request, and that key {reason}"
        super().__init__(self.detail)
        self.route = route
        self.reason = reason
