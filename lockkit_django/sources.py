"""What a Django lock key template may name (``"order:{order_id}:{user}"``).

A bare field names a URL keyword argument (the view's, or a middleware rule's named regex
group); the other roots are sources:

===================  ==========================================  when the request lacks it
``user``             the signed-in user's primary key            400
``user.<attr>``      an attribute of ``request.user``            400 if anonymous
``session``          the session key                             400
``session[name]``    a value stored in the session               400
``headers[Name]``    a request header                            400
``query[name]``      a query-string parameter (``request.GET``)  400
``form[name]``       a form field (``request.POST``)             400
``json[name]``       a member of the JSON body                   400
===================  ==========================================  =========================

``{session}`` (a bearer credential) and any item named like a credential (``Authorization``,
``Cookie``, ``X-Api-Key``, ``password``, ...) are rendered as a keyed hash under
``SECRET_KEY``, never as sent (:mod:`lockkit_core.guard.credentials`). A key may also be a
callable ``key(request, **url_kwargs) -> str``. The same names mean the same in Flask
(:mod:`lockkit_flask.sources`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from django.http import HttpRequest

from lockkit_core.guard import WEB_SOURCES, UserValue

__all__ = ["SOURCES", "values"]

SOURCES: Final = WEB_SOURCES


class _Session:
    """``{session}`` is the session key; ``{session[cart]}`` a stored value."""

    def __init__(self, session: Any) -> None:
        self._session = session

    def __format__(self, spec: str) -> str:
        key = self._session.session_key
        if not key:
            raise LookupError("no session")
        return format(key, spec)

    def __getitem__(self, name: str) -> Any:
        return self._session[name]


def _json(request: HttpRequest) -> Any:
    try:
        return json.loads(request.body)
    except ValueError:
        return None  # a body that is not JSON lacks every member: a 400 names it


def values(
    request: HttpRequest, url_kwargs: Mapping[str, Any], fields: tuple[str, ...]
) -> dict[str, Any]:
    """The URL arguments and the sources ``fields`` name. Only those are touched: reading
    ``request.POST`` consumes the body the view may want, and ``request.user`` may cost a
    database query."""
    found = dict(url_kwargs)
    for name in fields:
        if name == "user":
            user = getattr(request, "user", None)
            if user is not None and getattr(user, "is_authenticated", False):
                found["user"] = UserValue(user, user.pk)
        elif name == "session" and getattr(request, "session", None) is not None:
            found["session"] = _Session(request.session)
        elif name == "headers":
            found["headers"] = request.headers
        elif name == "query":
            found["query"] = request.GET
        elif name == "form":
            found["form"] = request.POST
        elif name == "json":
            found["json"] = _json(request)
    return found
