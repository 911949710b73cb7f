"""The guard's refusals as werkzeug HTTP exceptions, so ``@app.errorhandler(RequestLocked)``
overrides an answer::

    lockkit_core.guard.RequestLocked     + Conflict            -> RequestLocked      409
    lockkit_core.guard.LockStoreDown     + ServiceUnavailable  -> LockStoreDown      503
    lockkit_core.guard.RequestKeyMissing + BadRequest          -> RequestKeyMissing  400
    lockkit_core.guard.RequestKeyInvalid + BadRequest          -> RequestKeyInvalid  400

The status, headers and RFC 9457 body are the core's; werkzeug only carries them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from werkzeug.exceptions import BadRequest, Conflict, HTTPException, ServiceUnavailable

from lockkit_core import guard

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

__all__ = ["LockStoreDown", "RequestKeyInvalid", "RequestKeyMissing", "RequestLocked"]


class _HTTPProblem(HTTPException):
    """A werkzeug exception whose answer is the core problem's."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.description = getattr(self, "detail", "")

    def get_headers(
        self, environ: WSGIEnvironment | None = None, scope: dict[str, Any] | None = None
    ) -> list[tuple[str, str]]:
        assert isinstance(self, guard.Problem)
        return self.headers()

    def get_body(
        self, environ: WSGIEnvironment | None = None, scope: dict[str, Any] | None = None
    ) -> str:
        assert isinstance(self, guard.Problem)
        return self.body()


class RequestLocked(_HTTPProblem, guard.RequestLocked, Conflict):
    """Another request holds this route's lock: 409 with ``Retry-After``."""


class LockStoreDown(_HTTPProblem, guard.LockStoreDown, ServiceUnavailable):  # type: ignore[misc]
    """The lock store cannot be reached, so the route refuses to run unlocked: 503."""


class RequestKeyMissing(_HTTPProblem, guard.RequestKeyMissing, BadRequest):
    """The request lacks a value the route's lock key is built from: 400."""


class RequestKeyInvalid(_HTTPProblem, guard.RequestKeyInvalid, BadRequest):
    """The key the request's values make is too long (``LOCKKIT_MAX_KEY_BYTES``) or holds a
    NUL: 400."""


PROBLEMS = guard.Problems(
    busy=RequestLocked, down=LockStoreDown, missing=RequestKeyMissing, invalid=RequestKeyInvalid
)
