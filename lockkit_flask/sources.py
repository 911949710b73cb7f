"""What a Flask route's key template may name (``"seat:{event_id}:{query[row]}"``).

A bare field names a view argument (``{event_id}``); the other roots are sources:

=================  ============================================  when missing
``query[name]``    a query parameter (``request.args``)          400
``form[name]``     a form field (``request.form``)               400
``json[name]``     a member of the JSON body                     400
``headers[Name]``  a request header                              400
``user``           Flask-Login's ``current_user`` (its id)       400 if anonymous
``user.<attr>``    an attribute of ``current_user``              400 if anonymous
``session[name]``  a value in ``flask.session``                  400
``g.name``         an attribute of ``flask.g``                   500, a bug in the app
=================  ============================================  ============================

Credentials (``{session}`` itself, ``{session.sid}``, and any item named like one:
``Authorization``, ``Cookie``, ``X-Api-Key``, ``password``, ...) are rendered as a keyed hash
under ``SECRET_KEY``, never as sent (:mod:`lockkit_core.guard.credentials`).

``args`` and ``current_user`` are the former names of ``query`` and ``user`` (deprecated).
View arguments are checked against the view's signature when the route is decorated, so a
typo fails at import time. A callable key takes no arguments and reads ``request`` itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from flask import g, request, session

from lockkit_core import ConfigError
from lockkit_core.guard import WEB_SOURCES, RequestKey, Source, UserValue

__all__ = ["ALL_SOURCES", "DEPRECATED_SOURCES", "SOURCES", "Values", "check_template"]

SOURCES: Final = {
    **WEB_SOURCES,
    "g": Source("flask.g", hint="set it before the view runs (e.g. in a before_request hook)"),
}
#: Former names, still read (with a DeprecationWarning where a template uses them).
DEPRECATED_SOURCES: Final = {"args": "query", "current_user": "user"}
ALL_SOURCES: Final = {**SOURCES, **{old: SOURCES[new] for old, new in DEPRECATED_SOURCES.items()}}


def _user() -> UserValue:
    # Imported by name so that Flask-Login stays optional (and its untyped code out of mypy).
    user = importlib.import_module("flask_login").current_user
    if not getattr(user, "is_authenticated", False):
        raise LookupError("no signed-in user")
    return UserValue(user, user.get_id())


def _json() -> Any:
    body = request.get_json(silent=True)
    if body is None:
        raise LookupError("no JSON body")
    return body


_GETTERS: Final[dict[str, Callable[[], Any]]] = {
    "query": lambda: request.args,
    "args": lambda: request.args,
    "form": lambda: request.form,
    "json": _json,
    "headers": lambda: request.headers,
    "user": _user,
    "current_user": _user,
    "session": lambda: session,
    "g": lambda: g,
}


def check_template(key: RequestKey) -> None:
    """Warn about deprecated source names; refuse ``user`` without Flask-Login."""
    for old, new in DEPRECATED_SOURCES.items():
        if old in key.fields:
            warnings.warn(
                f"lock key template {key.template!r}: the source {old!r} is now called "
                f"{new!r}, as in lockkit_django",
                DeprecationWarning,
                stacklevel=4,
            )
    users = {"user", "current_user"} & set(key.fields)
    if users and importlib.util.find_spec("flask_login") is None:
        raise ConfigError(
            f"lock key template {key.template!r} names {users.pop()}, which needs "
            "Flask-Login: pip install Flask-Login"
        )


class Values(Mapping[str, Any]):
    """The current request's view arguments and sources, each read only when named."""

    def __init__(self, view_args: Mapping[str, Any]) -> None:
        self.view_args = view_args

    def __getitem__(self, root: str) -> Any:
        getter = _GETTERS.get(root)
        return getter() if getter is not None else self.view_args[root]

    def __iter__(self) -> Iterator[str]:
        return iter((*self.view_args, *SOURCES))

    def __len__(self) -> int:
        return len(self.view_args) + len(SOURCES)
