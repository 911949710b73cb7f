"""Request lock keys: templates such as ``"order:{order_id}:{user}"`` filled per request.

A bare field names a URL (view) argument; every other root names a *source* the adapter
declares (``query``, ``form``, ``headers``, ``user``, ...). A source knows how to describe a
missing value, and whose fault it is: the client's (a 400, :class:`RequestKeyMissing`) or the
app's (a :class:`~lockkit_core.ConfigError` with the source's hint).

A rendered key is bounded (``max_bytes`` of UTF-8, a 400 past it) and free of NUL (a 400): it
comes from the client. A value its source marks as a credential is rendered as a keyed hash
(:mod:`.credentials`).
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..errors import ConfigError
from ..keys import check_key
from .credentials import Secret, credential_digest, credential_item, session_credential
from .problems import RequestKeyInvalid, RequestKeyMissing

__all__ = ["WEB_SOURCES", "KeyFunc", "RequestKey", "Source", "UserValue"]

KeyFunc = Callable[..., Any]
_formatter = string.Formatter()


@dataclass(frozen=True)
class Source:
    """A request source a key template may name, as messages describe it."""

    what: str
    """The source itself: ``"the signed-in user"``, ``"the session"``."""
    item: str | None = None
    """One of its items: ``"the header"`` (``{headers[X-Desk]}`` -> the header 'X-Desk')."""
    hint: str | None = None
    """Set when a missing value is the app's bug: the ConfigError says how to fix it."""
    credential: Callable[[str], bool] | None = None
    """Which values are credentials, by item name (``""``: the source itself); they are
    rendered as a keyed hash, never as sent."""

    def describe(self, root: str, field: str) -> str:
        """The missing value in words, for the 400's detail."""
        name = _item(root, field)
        return f"{self.item} {name!r}" if name and self.item else self.what

    def is_credential(self, root: str, field: str) -> bool:
        """Whether ``field`` of this source names a credential."""
        return self.credential is not None and self.credential(_item(root, field))


def _item(root: str, field: str) -> str:
    return field[len(root) :].strip("[].")


#: The sources both web adapters offer, with the same names, words and credentials.
WEB_SOURCES: Final = {
    "query": Source("the query string", "the query parameter", credential=credential_item),
    "form": Source("the form", "the form field", credential=credential_item),
    "json": Source("the JSON body", "the JSON body member", credential=credential_item),
    "headers": Source("the headers", "the header", credential=credential_item),
    "user": Source("the signed-in user", "the signed-in user's"),
    "session": Source("the session", "the session value", credential=session_credential),
}


def _root(field: str) -> str:
    return field.split(".", 1)[0].split("[", 1)[0]


class RequestKey:
    """A parsed key template (or a key function the adapter calls), rendered per request."""

    def __init__(self, key: str | KeyFunc, sources: Mapping[str, Source]) -> None:
        self.sources = sources
        self.func: KeyFunc | None = None
        self.template = ""
        self.parts: list[tuple[str, str | None, str | None, str | None]] = []
        self.fields: tuple[str, ...] = ()
        # Which fields are credentials depends on their names only: decided once, here.
        self.secret_fields: frozenset[str] = frozenset()
        self._plain: list[tuple[str, str | None]] | None = None
        self.url_only = False
        if callable(key):
            self.func = key
            return
        if not isinstance(key, str):
            raise ConfigError(
                f"a lock key must be a template such as 'order:{{order_id}}' or a callable, "
                f"got {type(key).__name__} {key!r}"
            )
        check_key(key)
        self.template = key
        try:
            self.parts = list(_formatter.parse(key))
        except ValueError as exc:
            raise ConfigError(f"lock key template {key!r} is malformed: {exc}") from exc
        roots = []
        secret = set()
        for _, field, spec, conversion in self.parts:
            if field is None:
                continue
            if conversion not in (None, "r", "s", "a"):
                raise ConfigError(
                    f"lock key template {key!r} converts {{{field}}} with !{conversion}; "
                    "use !s, !r or !a, or none"
                )
            root = _root(field)
            if not root or root.isdigit():
                raise ConfigError(
                    f"lock key template {key!r} uses a positional field {{{field}}}; name a "
                    "view argument or a source instead, e.g. 'order:{order_id}:{user}'"
                )
            if spec and "{" in spec:
                raise ConfigError(f"lock key template {key!r} nests a field in a format spec")
            roots.append(root)
            source = sources.get(root)
            if source is not None and source.is_credential(root, field):
                secret.add(field)
        self.fields = tuple(dict.fromkeys(roots))
        self.secret_fields = frozenset(secret)
        # A template of bare names only (no attribute, index, spec, conversion or credential)
        # is rendered by reading each name straight from the values: decided once here, so a
        # request skips string.Formatter's parsing of every field.
        plain = [
            (literal, field)
            for literal, field, spec, conversion in self.parts
            if field is None or (field.isidentifier() and not spec and conversion is None)
        ]
        self._plain = plain if len(plain) == len(self.parts) and not secret else None
        #: The template names URL arguments only: an adapter may pass them as the values
        #: as they are, with no lookup of its sources.
        self.url_only = not any(root in sources for root in self.fields)

    def __repr__(self) -> str:
        return f"RequestKey({self.template or self.func!r})"

    def url_fields(self) -> tuple[str, ...]:
        """The fields that must come from URL (view) arguments."""
        return tuple(f for f in self.fields if f not in self.sources)

    def check_view(self, view: Callable[..., Any], skip: Iterable[str] = ()) -> None:
        """Raise :class:`ConfigError` if the template names a view argument ``view`` lacks,
        or ``view`` takes an argument named like a source the template uses. ``skip``: leading
        parameters that are not URL arguments (Django's ``request``, a method's ``self``)."""
        if self.func is not None:
            return
        params = dict(inspect.signature(view).parameters)
        for name in skip:
            params.pop(name, None)
        name = getattr(view, "__qualname__", repr(view))
        clash = [p for p in params if p in self.sources and p in self.fields]
        if clash:
            raise ConfigError(
                f"view {name} takes {', '.join(clash)}, which lock key templates reserve "
                f"for request sources ({', '.join(self.sources)}); rename the view argument"
            )
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return
        missing = [f for f in self.url_fields() if f not in params]
        if missing:
            raise ConfigError(
                f"lock key template {self.template!r} on view {name} names "
                f"{', '.join(missing)}, which is neither a view argument of {name} "
                f"({', '.join(params) or 'none'}) nor a source ({', '.join(self.sources)})"
            )

    def from_func(
        self,
        result: object,
        route: str,
        max_bytes: int | None = None,
        invalid: type[RequestKeyInvalid] = RequestKeyInvalid,
    ) -> str:
        """Check what the key function returned for ``route``: a key that is too long or
        holds a NUL came from the request, a 400 (``invalid``)."""
        if not isinstance(result, str) or not result:
            raise ConfigError(
                f"the lock key function {self.func!r} of {route} returned {result!r}; it "
                "must return a non-empty str"
            )
        return _checked(result, route, max_bytes, invalid)

    def render(
        self,
        route: str,
        values: Mapping[str, Any],
        missing: type[RequestKeyMissing] = RequestKeyMissing,
        *,
        secret: Secret | None = None,
        max_bytes: int | None = None,
        invalid: type[RequestKeyInvalid] = RequestKeyInvalid,
    ) -> str:
        """The key for one request from ``values`` (URL arguments and the sources the
        template names). A value the client did not send raises ``missing`` (a 400); one the
        app should have provided is a ConfigError naming the route and the field. A
        credential is rendered as its keyed hash under ``secret``; a key longer than
        ``max_bytes`` (UTF-8) or holding a NUL raises ``invalid`` (a 400)."""
        if self._plain is not None:
            try:
                text = "".join(
                    [lit if f is None else lit + format(values[f], "") for lit, f in self._plain]
                )
            except (LookupError, AttributeError, TypeError, ValueError):
                pass  # the full path below says what was missing or wrong
            else:
                return _checked(text, route, max_bytes, invalid)
        out = []
        for literal, field, spec, conversion in self.parts:
            out.append(literal)
            if field is None:
                continue
            try:
                value, _ = _formatter.get_field(field, (), values)
                value = _formatter.convert_field(value, conversion)
                text = _formatter.format_field(value, spec or "")
                if field in self.secret_fields:
                    # A credential never reaches the store, an operator or a log as sent.
                    text = credential_digest(text, secret or _no_secret)
                out.append(text)
            except (LookupError, AttributeError, TypeError) as exc:
                root = _root(field)
                source = self.sources.get(root)
                if source is not None and source.hint is None:
                    raise missing(route, field, source.describe(root, field)) from None
                hint = (
                    source.hint
                    if source is not None
                    else "the route does not pass that view argument (URL arguments: "
                    f"{', '.join(k for k in values if k not in self.sources) or 'none'})"
                )
                raise ConfigError(
                    f"{route} locks on {self.template!r}, but {{{field}}} has no value in "
                    f"this request ({type(exc).__name__}: {exc}); {hint}"
                ) from None
            except ValueError as exc:  # a format spec that does not fit the value's type
                raise ConfigError(
                    f"{route} locks on {self.template!r}, but {{{field}:{spec}}} does not "
                    f"format this request's value ({exc}); drop the format spec or convert "
                    "the value in a key function"
                ) from None
        return _checked("".join(out), route, max_bytes, invalid)


def _no_secret() -> None:
    return None


def _checked(key: str, route: str, max_bytes: int | None, invalid: type[RequestKeyInvalid]) -> str:
    """``key`` if it is usable; else ``invalid``: the template was checked when the rule was
    made, so what is wrong came with the request."""
    # The checks of check_key(), each answered as the client's fault.
    if not key:
        raise invalid(route, "is empty")
    if "\x00" in key:
        raise invalid(route, "holds a NUL character")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise invalid(route, "is not valid UTF-8 text") from None
    if max_bytes is not None and size > max_bytes:
        raise invalid(route, f"is {size} bytes long, more than the {max_bytes} bytes allowed")
    return key


class UserValue:
    """A signed-in user as a key source: ``{user}`` is its id, ``{user.email}`` an attribute."""

    def __init__(self, user: Any, ident: object) -> None:
        self._user = user
        self._ident = str(ident)

    def __format__(self, spec: str) -> str:
        return format(self._ident, spec)

    def __str__(self) -> str:
        return self._ident

    def __getattr__(self, name: str) -> Any:
        return getattr(self._user, name)
