"""Request values that are credentials, and the keyed hash they are shown as.

A session key, an ``Authorization`` header or a cookie lets whoever reads it act as its owner.
Lock keys are shown to operators (admin page, ``lockkit list``), stored as Redis key and file
names, and sent back in 409 bodies and logs; so a credential a key template names is rendered as
``HMAC-SHA256(secret, value)``, truncated to 128 bits: the same credential gives the same key in
every process that shares the secret (Django's or Flask's ``SECRET_KEY``), and nobody who sees
the key learns the credential, nor can test guesses without the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from typing import Final

from ..errors import ConfigError

__all__ = [
    "CREDENTIAL_NAME",
    "Secret",
    "credential_digest",
    "credential_item",
    "session_credential",
]

#: Where a guard finds its secret: a framework's ``SECRET_KEY``, read when first needed.
Secret = Callable[[], "str | bytes | None"]

#: Names of headers, fields and parameters that carry credentials (case-insensitive,
#: searched in the name): ``Authorization``, ``Cookie``, ``X-Api-Key``, ``csrf_token``, ...
CREDENTIAL_NAME: Final = re.compile(
    r"authorization|cookie|token|secret|passw|session|api[-_]?key|signature|credential",
    re.IGNORECASE,
)
_PURPOSE: Final = b"lockkit.guard.credential\x00"


def credential_item(name: str) -> bool:
    """Whether the item ``name`` (a header, query parameter, form field, JSON member)
    carries a credential by its name (``Authorization``, ``Cookie``, ``X-Api-Key``,
    ``X-Auth-Token``, ``password``, ...)."""
    return bool(CREDENTIAL_NAME.search(name))


def session_credential(name: str) -> bool:
    """``{session}`` itself (Django's session key; Flask's whole session) and a server-side
    session's id (``{session.sid}``) are credentials, as are items named like one; other
    stored values (``{session[cart]}``) are not."""
    return name in ("", "sid") or credential_item(name)


def credential_digest(value: str, secret: Secret) -> str:
    """The keyed hash a credential is shown as: 32 hex digits."""
    key = secret()
    if not key:
        raise ConfigError(
            "a lock key or Idempotency-Key scope names a credential (the session, an "
            "Authorization-like header), which lockkit shows only as a keyed hash, and no "
            "secret is set: set SECRET_KEY (Django settings, or Flask's app.config)"
        )
    raw = key.encode() if isinstance(key, str) else key
    digest = hmac.new(raw, _PURPOSE + value.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return digest.hexdigest()[:32]
