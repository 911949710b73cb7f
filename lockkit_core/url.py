"""Parse backend URLs such as ``redis://:pw@127.0.0.1:6379/0?socket_timeout=2``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from .errors import ConfigError

__all__ = ["LockURL", "is_secret", "parse_url"]

#: option names whose values are credentials: never shown
_SECRET_WORDS = ("password", "passwd", "secret", "token", "auth", "key", "credential")


def is_secret(name: str) -> bool:
    """True if an option called ``name`` holds a credential (``password``, ``ssl_keyfile``
    is a path and is shown: only names that say secret, password, token or auth)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS) and not lowered.endswith(
        ("file", "_path", "_reqs", "mechanism")
    )


_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)


@dataclass(frozen=True)
class LockURL:
    """A parsed backend URL. ``query`` holds the ``?name=value`` options as strings."""

    raw: str
    scheme: str
    host: str | None = None
    port: int | None = None
    username: str | None = None
    password: str | None = None
    path: str = ""
    query: dict[str, str] = field(default_factory=dict)

    def redacted(self) -> str:
        """The URL with any password replaced by ``***``, safe to log or show."""
        if self.password is None:
            return self.raw
        return self.raw.replace(":" + _quoted_password(self.raw), ":***", 1)


def _quoted_password(raw: str) -> str:
    netloc = urlsplit(raw).netloc
    userinfo = netloc.rpartition("@")[0]
    return userinfo.partition(":")[2]


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
            f"malformed backend URL {url!r}: expected 'scheme://...', for example "
            "'file://', 'memory://' or 'redis://127.0.0.1:6379/0'"
        )
    url = url.strip()
    scheme = match.group(1).lower()
    parts = urlsplit(url)
    if parts.fragment:
        raise ConfigError(f"malformed backend URL {url!r}: a '#fragment' means nothing here")
    hosts = parts.netloc.rpartition("@")[2]
    try:
        # Several servers ("h1:2379,h2:2379"): ``host`` keeps the list, the backend splits it.
        port = None if "," in hosts else parts.port
    except ValueError as exc:
        raise ConfigError(
            f"malformed backend URL {url!r}: the port must be a number from 1 to 65535"
        ) from exc
    query: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if name in query:
            raise ConfigError(f"backend URL {url!r} sets option {name!r} twice; keep one")
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
