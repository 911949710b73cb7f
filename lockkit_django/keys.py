"""Request lock keys: templates such as ``"order:{order_id}:{user}"`` filled per request.

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
===================  ==========================================  =========================

A key may also be a callable ``key(request, **url_kwargs) -> str``. Templates are parsed by
the core's :class:`~lockkit_core.KeyTemplate`, and every key is checked by its ``check_key``.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from typing import Any, Final

from django.http import HttpRequest

from lockkit_core import ConfigError, KeyTemplate, LockKitError
from lockkit_core.keys import check_key

__all__ = ["SOURCES", "KeyFunc", "RequestKey", "RequestKeyMissing"]

KeyFunc = Callable[..., str]
SOURCES: Final = ("user", "session", "headers", "query", "form")
_formatter = string.Formatter()


class RequestKeyMissing(LockKitError):
    """The request lacks a value its lock key is built from (answered with a 400)."""

    def __init__(self, template: str, field: str, what: str) -> None:
        self.template = template
        self.field = field
        super().__init__(
            f"this request's lock key {template!r} is built from {what}, which the request "
            f"did not send (field {{{field}}})"
        )


class _User:
    """``{user}`` is the primary key; ``{user.email}`` reads the user object."""

    def __init__(self, user: Any) -> None:
        self._user = user

    def __format__(self, spec: str) -> str:
        return format(str(self._user.pk), spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._user, name)


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


class RequestKey:
    """A parsed key template (or key function), rendered per request."""

    def __init__(self, key: str | KeyFunc) -> None:
        self.func: KeyFunc | None = None
        self.template = ""
        self.fields: tuple[str, ...] = ()
        if callable(key):
            self.func = key
            return
        if not isinstance(key, str):
            raise ConfigError(
                f"a lock key must be a template such as 'order:{{order_id}}' or a callable "
                f"key(request, **url_kwargs), got {type(key).__name__} {key!r}"
            )
        self.fields = KeyTemplate(key).fields
        self.template = key
        for _, name, spec, _ in _formatter.parse(key):
            if name is not None and spec and "{" in spec:
                raise ConfigError(f"lock key template {key!r} nests a field in a format spec")

    def __repr__(self) -> str:
        return f"RequestKey({self.template or self.func!r})"

    def url_fields(self) -> tuple[str, ...]:
        """The fields that must come from URL keyword arguments."""
        return tuple(f for f in self.fields if f not in SOURCES)

    def render(self, request: HttpRequest, url_kwargs: Mapping[str, Any]) -> str:
        """The key for ``request``. A value the client did not send raises
        :class:`RequestKeyMissing`; a URL argument the route lacks is a ConfigError."""
        if self.func is not None:
            key = self.func(request, **url_kwargs)
            if not isinstance(key, str) or not key:
                raise ConfigError(
                    f"the lock key function {self.func!r} returned {key!r}; it must return "
                    "a non-empty str"
                )
            return check_key(key)
        values = dict(url_kwargs)
        # Only the sources the template names are touched: reading request.POST consumes
        # the body the view may want, and request.user may cost a database query.
        if "user" in self.fields:
            user = getattr(request, "user", None)
            if user is not None and getattr(user, "is_authenticated", False):
                values["user"] = _User(user)
        if "session" in self.fields and getattr(request, "session", None) is not None:
            values["session"] = _Session(request.session)
        if "headers" in self.fields:
            values["headers"] = request.headers
        if "query" in self.fields:
            values["query"] = request.GET
        if "form" in self.fields:
            values["form"] = request.POST
        out: list[str] = []
        for literal, field, spec, conversion in _formatter.parse(self.template):
            out.append(literal)
            if field is None:
                continue
            root = field.split(".", 1)[0].split("[", 1)[0]
            try:
                value, _ = _formatter.get_field(field, (), values)
                value = _formatter.convert_field(value, conversion)
                out.append(_formatter.format_field(value, spec or ""))
            except (LookupError, AttributeError, TypeError) as exc:
                if root not in SOURCES:
                    raise ConfigError(
                        f"lock key template {self.template!r} names {{{field}}}, which is "
                        f"not a URL argument of {request.path!r} (URL arguments: "
                        f"{', '.join(url_kwargs) or 'none'}) nor a source "
                        f"({', '.join(SOURCES)})"
                    ) from exc
                raise RequestKeyMissing(self.template, field, _describe(root, field)) from None
        return check_key("".join(out))


def _describe(root: str, field: str) -> str:
    item = field[len(root) :].strip("[].") or None
    return {
        "user": "the signed-in user",
        "session": f"the session{' value ' + repr(item) if item else ''}",
        "headers": f"the header {item!r}",
        "query": f"the query parameter {item!r}",
        "form": f"the form field {item!r}",
    }[root]
