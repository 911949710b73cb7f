"""``LOCKKIT['MIDDLEWARE']['RULES']``: path rules for :class:`~lockkit_django.LockMiddleware`.

Each rule is the core guard's :class:`~lockkit_core.guard.RequestRule` plus a path regex
whose named groups are the URL arguments of its key template.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from django.http import HttpRequest
from django.utils.module_loading import import_string

from lockkit_core import ConfigError
from lockkit_core.config import UNSET
from lockkit_core.guard import KeyFunc, RequestRule

from .sources import SOURCES

__all__ = ["PathRule", "rule_from_mapping"]

_RULE_KEYS: Final = ("PATH", "METHODS", "KEY", "WAIT", "TTL", "FAIL_OPEN", "ON_BUSY", "SCOPE")


class PathRule(RequestRule):
    """A middleware rule: requests whose path matches ``PATH`` lock on ``KEY``."""

    def __init__(self, path: str, key: str | KeyFunc, **options: Any) -> None:
        super().__init__(key, sources=SOURCES, **options)
        try:
            self.path = re.compile(path)
        except (re.error, TypeError) as exc:
            raise ConfigError(f"PATH {path!r} is not a regular expression: {exc}") from exc
        groups = set(self.path.groupindex)
        missing = [f for f in self.key.url_fields() if f not in groups]
        if missing:
            raise ConfigError(
                f"KEY {self.key.template!r} names {', '.join(missing)}, which PATH "
                f"{path!r} does not capture; add (?P<{missing[0]}>...) to PATH"
            )

    def match(self, request: HttpRequest) -> dict[str, Any] | None:
        """The URL arguments if ``request``'s path matches, else None."""
        found = self.path.search(request.path_info)
        return None if found is None else found.groupdict()


def _import(where: str, name: str, value: object) -> object:
    try:
        return import_string(str(value))
    except ImportError as exc:
        raise ConfigError(f"{where} {name} {value!r} cannot be imported: {exc}") from exc


def rule_from_mapping(raw: Mapping[str, Any], where: str) -> PathRule:
    """Build a :class:`PathRule` from a ``LOCKKIT['MIDDLEWARE']['RULES']`` entry."""
    rule = {str(k).upper(): v for k, v in raw.items()}
    unknown = sorted(set(rule) - set(_RULE_KEYS))
    if unknown:
        raise ConfigError(f"{where} has unknown keys {unknown}; known: {', '.join(_RULE_KEYS)}")
    for needed in ("PATH", "KEY"):
        if needed not in rule:
            raise ConfigError(
                f"{where} needs {needed}, e.g. {{'PATH': r'^/orders/"
                "(?P<order_id>\\d+)/pay/$', 'KEY': 'order:{order_id}'}"
            )
    key = rule["KEY"]
    if isinstance(key, str) and key.startswith("callable:"):
        key = _import(where, "KEY", key.removeprefix("callable:"))
    on_busy = rule.get("ON_BUSY")
    if isinstance(on_busy, str):
        on_busy = _import(where, "ON_BUSY", on_busy)
    try:
        return PathRule(
            rule["PATH"],
            key,
            wait=rule.get("WAIT", UNSET),
            ttl=rule.get("TTL", UNSET),
            methods=rule.get("METHODS"),
            fail_open=rule.get("FAIL_OPEN", False),
            scope=rule.get("SCOPE", "global"),
            on_busy=on_busy,
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
