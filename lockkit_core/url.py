"""Parse backend URLs such as ``redis://:pw@127.0.0.1:6379/0?socket_timeout=2``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from .errors import ConfigError
from .redact import HIDDEN, redact_options, redact_url

__all__ = ["LockURL", "parse_url"]

_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)


@dataclass(frozen=True, repr=False)
class LockURL:
    """A parsed backend URL. ``query`` holds the ``?name=value`` options as strings.
    Its ``repr()`` hides the password and secret options, as :meth:`redacted` does."""

    raw: str
    scheme: str
    host: str | None = None
    port: int | None = None
    username: str | None = None
    password: str | None = None
    path: str = ""
    query: dict[str, str] = field(default_factory=dict)

    def redacted(self) -> str:
        """The URL with its password and secret options replaced by ``***``, safe to show."""
        return redact_url(self.raw)

    def __repr__(self) -> str:
        password = None if self.password is None else HIDDEN
        return (
            f"LockURL(raw={self.redacted()!r}, scheme={self.scheme!r}, host={self.host!r}, "
            f"port={self.port!r}, username={self.username!r}, password={password!r}, "
            f"path={self.path!r}, query={redact_options(self.query)!r})"
        )


def parse_url(url: str) -> LockURL:
    """Split ``url`` into a :class:`LockURL`; a malformed one is a :class:`ConfigError`."""
    if not isinstance(url, str):
        raise ConfigError(
            f"the backend URL must be a string such as 'redis://127.0.0.1:6379/0', "
            f"got {type(url).__name__}"
        )
    match = _SCHEME.match(url.strip())
    if match is None:
        raise ConfigError(
            f"malformed backend URL {redact_url(url)!r}: expected 'scheme://...', for example "
            "'file://', 'memory://' or 'redis://127.0.0.1:6379/0'"
        )
    url = url.strip()
    scheme = match.group(1).lower()
    parts = urlsplit(url)
    if parts.fragment:
        raise ConfigError(
            f"malformed backend URL {redact_url(url)!r}: a '#fragment' means nothing here"
        )
    hosts = parts.netloc.rpartition("@")[2]
    try:
        # Several servers ("h1:2379,h2:2379"): ``host`` keeps the list, the backend splits it.
        port = None if "," in hosts else parts.port
    except ValueError as exc:
        raise ConfigError(
            f"malformed backend URL {redact_url(url)!r}: the port must be a number from 1 to 65535"
        ) from exc
    query: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if name in query:
            raise ConfigError(
                f"backend URL {redact_url(url)!r} sets option {name!r} twice; keep one"
            )
        query[name] = value
    return LockURL(
        raw=url,
        scheme=scheme,
        host=hosts.lower() if "," in hosts else parts.hostname,
        port=port,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        path=unquote(parts.path),
        query=query,
    )
