"""Route lock keys: templates such as ``"seat:{event_id}:{args[row]}"`` filled per request.

A bare field names a view argument (``{event_id}``); the other roots are sources:

=================  ===========================================  when missing
``args[name]``     a query parameter (``request.args``)         400
``form[name]``     a form field (``request.form``)              400
``json[name]``     a member of the JSON body                    400
``headers[Name]``  a request header                             400
``g.name``         an attribute of ``flask.g``                  500, a bug in the app
``current_user``   Flask-Login's ``current_user`` (``.id``)     500, a bug in the app
=================  ===========================================  ============================

View arguments are checked against the view's signature when the route is decorated, so a
typo fails at import time. A callable key takes no arguments and reads ``request`` itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import string
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from flask import g, request

from lockkit_core import ConfigError
from lockkit_core.keys import check_key

from .errors import RouteKeyMissing

__all__ = ["SOURCES", "RouteKey"]

#: What each request source is called in messages; a missing value there is the client's fault.
_CLIENT_SOURCES = {
    "args": "the query parameter",
    "form": "the form field",
    "json": "the JSON body member",
    "headers": "the header",
}
SOURCES = (*_CLIENT_SOURCES, "g", "current_user")

_formatter = string.Formatter()

_HINTS = {
    "g": "set it before the view runs (e.g. in a before_request hook)",
    "current_user": "the user is anonymous or lacks it: put @login_required above @lock_route",
}
_HINT = "the route does not pass that view argument"


def _current_user() -> Any:
    # Imported by name so that Flask-Login stays optional (and untyped code stays out).
    return importlib.import_module("flask_login").current_user


_GETTERS: dict[str, Callable[[], Any]] = {
    "args": lambda: request.args,
    "form": lambda: request.form,
    "json": lambda: request.get_json(silent=True),
    "headers": lambda: request.headers,
    "g": lambda: g,
    "current_user": _current_user,
}


class _Values(Mapping[str, Any]):
    """The roots a template may name, looked up lazily for the current request."""

    def __getitem__(self, root: str) -> Any:
        getter = _GETTERS.get(root)
        return getter() if getter is not None else (request.view_args or {})[root]

    def __iter__(self) -> Iterator[str]:
        return iter(SOURCES)

    def __len__(self) -> int:
        return len(SOURCES)


def _item(field: str, root: str) -> str:
    """``args[seat]`` -> ``seat``: the name a message should show for a missing value."""
    rest = field[len(root) :]
    return rest.strip("[].") or root


class RouteKey:
    """A route's key template (or key function), rendered once per locked request."""

    def __init__(self, key: str | Callable[[], str]) -> None:
        self.func: Callable[[], str] | None = None
        self.template: str | None = None
        self.parts: list[tuple[str, str | None, str | None, str | None]] = []
        self.roots: tuple[str, ...] = ()
        if callable(key):
            self.func = key
            return
        check_key(key)
        self.template = key
        try:
            self.parts = list(_formatter.parse(key))
        except ValueError as exc:
            raise ConfigError(f"lock key template {key!r} is malformed: {exc}") from exc
        roots = []
        for _, field, spec, _ in self.parts:
            if field is None:
                continue
            root = field.split(".", 1)[0].split("[", 1)[0]
            if not root or root.isdigit():
                raise ConfigError(
                    f"lock key template {key!r} uses a positional field {{{field}}}; name a "
                    "view argument or a source instead, e.g. 'seat:{event_id}:{args[row]}'"
                )
            if spec and "{" in spec:
                raise ConfigError(f"lock key template {key!r} nests a field in a format spec")
            roots.append(root)
        self.roots = tuple(dict.fromkeys(roots))
        if "current_user" in self.roots and importlib.util.find_spec("flask_login") is None:
            raise ConfigError(
                f"lock key template {key!r} names current_user, which needs Flask-Login: "
                "pip install Flask-Login"
            )

    def __repr__(self) -> str:
        return f"RouteKey({self.template or self.func!r})"

    def check_view(self, view: Callable[..., Any]) -> None:
        """Raise :class:`ConfigError` if the template names a view argument ``view`` lacks."""
        params = inspect.signature(view).parameters
        name = getattr(view, "__qualname__", repr(view))
        clash = [p for p in params if p in SOURCES]
        if clash and any(root in SOURCES for root in self.roots):
            raise ConfigError(
                f"view {name} takes {', '.join(clash)}, which lock key templates reserve "
                f"for request sources ({', '.join(SOURCES)}); rename the view argument"
            )
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return
        missing = [r for r in self.roots if r not in SOURCES and r not in params]
        if missing:
            raise ConfigError(
                f"lock key template {self.template!r} on view {name} names "
                f"{', '.join(missing)}, which is neither a view argument of {name} "
                f"({', '.join(params) or 'none'}) nor a source ({', '.join(SOURCES)})"
            )

    def render(self, route: str) -> str:
        """The key for the current request. A value the client did not send is a 400
        (:class:`RouteKeyMissing`); one the app should have provided is a ConfigError."""
        if self.func is not None:
            key = self.func()
            if not isinstance(key, str) or not key:
                raise ConfigError(
                    f"the lock key function {self.func!r} of {route} returned {key!r}; it "
                    "must return a non-empty str"
                )
            return check_key(key)
        values = _Values()
        out = []
        for literal, field, spec, conversion in self.parts:
            out.append(literal)
            if field is None:
                continue
            root = field.split(".", 1)[0].split("[", 1)[0]
            try:
                value, _ = _formatter.get_field(field, (), values)
            except (LookupError, AttributeError, TypeError) as exc:
                if root in _CLIENT_SOURCES:
                    what = f"{_CLIENT_SOURCES[root]} {_item(field, root)!r}"
                    raise RouteKeyMissing(route, field, what) from None
                raise ConfigError(
                    f"{route} locks on {self.template!r}, but {{{field}}} has no value in "
                    f"this request ({type(exc).__name__}: {exc}); {_HINTS.get(root, _HINT)}"
                ) from None
            value = _formatter.convert_field(value, conversion)
            out.append(_formatter.format_field(value, spec or ""))
        return check_key("".join(out))
