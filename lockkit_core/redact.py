"""Credentials out of everything a human reads: the one redaction every output goes through.

A store URL may carry a password in its ``user:password@`` part or in its query string
(``?password=...``), and ``OPTIONS`` may hold one too. ``repr()`` of a kit, its config and a
parsed URL, ``kit.admin``'s store line, the ``lockkit`` and ``manage.py lockkit`` commands and
every error message show URLs and options only through :func:`redact_url` and
:func:`redact_options`. :func:`redact_url` is string surgery, never a parse that can fail, so
the error about a malformed URL is redacted as well.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import unquote

__all__ = ["HIDDEN", "is_secret", "redact_options", "redact_url"]

#: what a secret is shown as
HIDDEN: Final = "***"

#: words that make an option name a credential (``password``, ``auth_token``, ...); names of
#: files (``ssl_keyfile``, ``key_file``) are paths, not secrets, and stay readable
_SECRET_WORDS: Final = ("password", "passwd", "pwd", "secret", "token", "credential", "apikey")


def is_secret(name: str) -> bool:
    """True if an option called ``name`` holds a credential."""
    lowered = name.lower().replace("_", "").replace("-", "")
    return any(word in lowered for word in _SECRET_WORDS)


def redact_url(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part and the value of each secret
    query option (:func:`is_secret`) replaced by ``***``. Anything that is not a well-formed
    URL is redacted the same way, as far as it looks like one."""
    if not isinstance(url, str):
        return repr(url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    # The authority runs to the first '/', '?' or '#'; its userinfo to its last '@' (a raw
    # '@' in a password must not leave the password's tail behind).
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    first_colon = rest.find(":")
    if "@" not in rest[:end] and 0 <= first_colon < end and "@" in rest[end:]:
        # A raw '/', '?' or '#' in a password ends the authority too early: with a user
        # and a ':' before it and an '@' after it, the userinfo runs to the last '@' before
        # the '/' that follows the first such '@' (an '@' in the path or query then may
        # hide more than the password, never less).
        first_at = rest.find("@", end)
        slash = rest.find("/", first_at)
        last_at = rest.rfind("@", 0, len(rest) if slash < 0 else slash)
        end = min((i for i in (rest.find(c, last_at) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    userinfo, at, hosts = authority.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        authority = f"{user}:{HIDDEN}@{hosts}" if colon else authority
    path, question, query = tail.partition("?")
    if question:
        query, hash_, fragment = query.partition("#")
        query = "&".join(_redact_pair(pair) for pair in query.split("&")) + hash_ + fragment
    return f"{scheme}{sep}{authority}{path}{question}{query}"


def _redact_pair(pair: str) -> str:
    name, equals, value = pair.partition("=")
    if equals and value and is_secret(unquote(name)):
        return f"{name}={HIDDEN}"
    return pair


def redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` with the value of every secret option replaced by ``***``."""
    return {name: HIDDEN if is_secret(str(name)) else value for name, value in options.items()}
