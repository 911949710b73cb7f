"""``LOCKKIT['IDEMPOTENCY']``: which requests carry an ``Idempotency-Key``, and how long
their responses are kept.

::

    LOCKKIT = {"IDEMPOTENCY": {
        "PATHS": [r"^/api/payments/"],   # IdempotencyMiddleware: requests whose path matches
        "METHODS": ["POST", "PATCH"],    # ... and whose method is one of these (the default)
        "REQUIRED": False,               # True: a request without the header answers 400
        "EXPIRES": 86400,                # seconds a response is replayed (whole seconds)
        "CACHE": "default",              # the settings.CACHES alias the responses live in
        "MAX_KEY_LENGTH": 255,           # longer keys answer 400
        "SCOPE": None,                   # "myapp.keys.api_client": principal of anonymous callers
    }}

``@idempotent(...)`` takes the same options in lower case; what it does not name comes from
this setting, then from the defaults above.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from django.conf import settings
from django.http import HttpRequest
from django.utils.module_loading import import_string

from lockkit_core import ConfigError

__all__ = [
    "DEFAULT_METHODS",
    "IDEMPOTENCY_SETTINGS",
    "IdempotencySettings",
    "ScopeFunc",
    "parse_idempotency",
]

ScopeFunc = Callable[[HttpRequest], "str | None"]
DEFAULT_METHODS: Final = frozenset({"POST", "PATCH"})
IDEMPOTENCY_SETTINGS: Final = (
    "PATHS",
    "METHODS",
    "REQUIRED",
    "EXPIRES",
    "CACHE",
    "MAX_KEY_LENGTH",
    "SCOPE",
)
_HTTP_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_WHERE: Final = "LOCKKIT['IDEMPOTENCY']"


@dataclass(frozen=True)
class IdempotencySettings:
    """How ``Idempotency-Key`` requests are handled (one per settings value or decorator)."""

    paths: tuple[re.Pattern[str], ...] = ()
    methods: frozenset[str] = DEFAULT_METHODS
    required: bool = False
    expires: int = 86400
    cache: str = "default"
    max_key_length: int = 255
    scope: ScopeFunc | None = None

    def matches(self, request: HttpRequest) -> bool:
        """Whether the middleware handles ``request`` (method and one of ``paths``)."""
        return request.method in self.methods and any(
            p.search(request.path_info) for p in self.paths
        )

    def override(self, **options: Any) -> IdempotencySettings:
        """These settings with the decorator's options (lower-case names) applied."""
        given = {k.upper(): v for k, v in options.items() if v is not None}
        unknown = sorted(set(given) - set(IDEMPOTENCY_SETTINGS) - {"PATHS"})
        if unknown or "PATHS" in given:
            raise ConfigError(
                f"@idempotent has no option {', '.join(unknown or ['paths']).lower()}; known: "
                "methods, required, expires, cache, max_key_length, scope"
            )
        return replace(self, **_parsed(given, "@idempotent"))


def _methods(value: object, where: str) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError(f"{where} METHODS must be a list such as ['POST'], got {value!r}")
    methods = frozenset(str(m).upper() for m in value)
    if not methods or not methods <= _HTTP_METHODS:
        raise ConfigError(
            f"{where} METHODS {sorted(methods)} must be some of {sorted(_HTTP_METHODS)}"
        )
    return methods


def _whole(value: object, name: str, where: str, minimum: int) -> int:
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is None or not math.isfinite(number) or number != int(number):
        raise ConfigError(f"{where} {name} must be a whole number, got {value!r}")
    if number < minimum:
        raise ConfigError(f"{where} {name} must be at least {minimum}, got {value!r}")
    return int(number)


def _cache(value: object, where: str) -> str:
    aliases = getattr(settings, "CACHES", {"default": {}})
    if not isinstance(value, str) or value not in aliases:
        raise ConfigError(
            f"{where} CACHE must name one of settings.CACHES ({', '.join(aliases)}), got {value!r}"
        )
    return value


def _scope(value: object, where: str) -> ScopeFunc:
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as exc:
            raise ConfigError(f"{where} SCOPE {value!r} cannot be imported: {exc}") from exc
    if not callable(value):
        raise ConfigError(f"{where} SCOPE must be a callable (request) -> str, got {value!r}")
    return value


def _paths(value: object, where: str) -> tuple[re.Pattern[str], ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(f"{where} PATHS must be a list of regular expressions, got {value!r}")
    try:
        return tuple(re.compile(p) for p in value)
    except (re.error, TypeError) as exc:
        raise ConfigError(f"{where} PATHS has an invalid regular expression: {exc}") from exc


def _parsed(given: Mapping[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "PATHS" in given:
        out["paths"] = _paths(given["PATHS"], where)
    if "METHODS" in given:
        out["methods"] = _methods(given["METHODS"], where)
    if "REQUIRED" in given:
        if not isinstance(given["REQUIRED"], bool):
            raise ConfigError(f"{where} REQUIRED must be True or False, got {given['REQUIRED']!r}")
        out["required"] = given["REQUIRED"]
    if "EXPIRES" in given:
        out["expires"] = _whole(given["EXPIRES"], "EXPIRES (seconds)", where, 1)
    if "CACHE" in given:
        out["cache"] = _cache(given["CACHE"], where)
    if "MAX_KEY_LENGTH" in given:
        out["max_key_length"] = _whole(given["MAX_KEY_LENGTH"], "MAX_KEY_LENGTH", where, 1)
    if "SCOPE" in given and given["SCOPE"] is not None:
        out["scope"] = _scope(given["SCOPE"], where)
    return out


def parse_idempotency(raw: object) -> IdempotencySettings:
    """Validate ``LOCKKIT['IDEMPOTENCY']``; every problem is a ConfigError naming it."""
    if raw is None:
        return IdempotencySettings()
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{_WHERE} must be a dict such as {{'PATHS': [r'^/api/'], 'EXPIRES': 86400}}, "
            f"got {type(raw).__name__}"
        )
    given = {str(k).upper(): v for k, v in raw.items()}
    unknown = sorted(set(given) - set(IDEMPOTENCY_SETTINGS))
    if unknown:
        raise ConfigError(
            f"unknown {_WHERE} setting {unknown}; known: {', '.join(IDEMPOTENCY_SETTINGS)}"
        )
    return IdempotencySettings(**_parsed(given, _WHERE))
