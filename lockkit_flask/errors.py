"""HTTP errors of the Flask adapter, each a lockkit error and a werkzeug HTTP exception.

::

    LockUnavailable + Conflict            -> RouteLocked          409, Retry-After
    BackendUnavailable + ServiceUnavailable -> LockStoreUnavailable 503 (fail closed)
    LockKitError + BadRequest             -> RouteKeyMissing      400, the request lacks a value

Each answers with an RFC 9457 ``application/problem+json`` body. Override the answer with
``@app.errorhandler(RouteLocked)`` (or ``on_busy=`` on one route).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from werkzeug.exceptions import BadRequest, Conflict, HTTPException, ServiceUnavailable

from lockkit_core import BackendUnavailable, LockKitError, LockUnavailable

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

__all__ = ["LockStoreUnavailable", "RouteKeyMissing", "RouteLocked"]

PROBLEM_JSON = "application/problem+json"


class _Problem(HTTPException):
    """An HTTP exception whose body is ``application/problem+json``."""

    retry_seconds: int | None = None

    def problem(self) -> dict[str, Any]:
        """The problem document; subclasses add their own members."""
        return {
            "type": "about:blank",
            "title": self.name,
            "status": self.code,
            "detail": self.description,
        }

    def get_headers(
        self, environ: WSGIEnvironment | None = None, scope: dict[str, Any] | None = None
    ) -> list[tuple[str, str]]:
        headers = [("Content-Type", PROBLEM_JSON)]
        if self.retry_seconds is not None:
            headers.append(("Retry-After", str(self.retry_seconds)))
        return headers

    def get_body(
        self, environ: WSGIEnvironment | None = None, scope: dict[str, Any] | None = None
    ) -> str:
        return json.dumps(self.problem(), sort_keys=True)


class RouteLocked(_Problem, LockUnavailable, Conflict):
    """Another request holds this route's lock: 409 with ``Retry-After``."""

    def __init__(self, key: str, route: str, retry_after: int) -> None:
        self.route = route
        self.retry_seconds = retry_after
        super().__init__(
            key,
            f"{route} is busy: another request holds the lock {key!r}; retry in {retry_after} s",
        )

    def problem(self) -> dict[str, Any]:
        return {**super().problem(), "lock": self.key, "route": self.route}


class LockStoreUnavailable(_Problem, BackendUnavailable, ServiceUnavailable):
    """The lock store cannot be reached, so the route refuses to run unlocked: 503."""

    def __init__(self, route: str, retry_after: int) -> None:
        self.route = route
        self.retry_seconds = retry_after
        super().__init__(
            f"{route} needs a lock and the lock store cannot be reached; retry in {retry_after} s"
        )


class RouteKeyMissing(_Problem, LockKitError, BadRequest):
    """The request lacks a value the route's lock key is built from: 400."""

    def __init__(self, route: str, field: str, what: str) -> None:
        self.route = route
        self.field = field
        super().__init__(
            f"{route} locks on a key built from {what}, which this request did not send "
            f"(key field {{{field}}})"
        )
