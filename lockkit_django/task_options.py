"""The lock options of a Django task, decided: ``@locked_task(...)`` > ``LOCKKIT["TASKS"]`` >
the defaults here. No import of the tasks framework, so ``settings.LOCKKIT`` (and its system
check) can validate the ``TASKS`` mapping anywhere.

``"TASKS": {"TTL": 30, "ON_DUPLICATE": "skip", "ONCE": None, "WAIT": 0, "ENQUEUE_LOCK": True,
"ENQUEUE_TTL": 3600, "REMEMBER": 86400, "ENABLED": True}``; the same names in lower case are
the decorator's keywords.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from lockkit_core import ConfigError
from lockkit_core.config import UNSET, check_ttl
from lockkit_core.dedupe.options import DEFAULTS, TaskOptions

__all__ = ["DEFAULTS", "ON_DUPLICATE", "TaskOptions", "check_option", "decide", "parse_tasks"]

ON_DUPLICATE: Final = ("skip", "raise")


def check_option(name: str, value: Any, where: str | None = None) -> Any:
    """Validate one option; a bad value is a :class:`ConfigError` naming ``where`` (the
    setting, e.g. ``LOCKKIT['TASKS']['TTL']``) or the keyword ``name``."""
    label = where or name
    if name not in DEFAULTS:
        raise ConfigError(f"unknown task lock option {label}; known: {', '.join(DEFAULTS)}")
    if name in ("enabled", "enqueue_lock"):
        if not isinstance(value, bool):
            raise ConfigError(f"{label} must be True or False, got {value!r}")
        return value
    if name == "on_duplicate":
        if value not in ON_DUPLICATE:
            raise ConfigError(f"{label} must be one of {', '.join(ON_DUPLICATE)}, got {value!r}")
        return value
    if name == "wait":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value < 0:
            raise ConfigError(f"{label} must be zero or more seconds, got {value!r}")
        return float(value)
    if name == "once" and value is None:
        return None
    return check_ttl(value, label)


def parse_tasks(raw: object) -> dict[str, Any]:
    """Validate ``LOCKKIT["TASKS"]``: a dict of the options above, keys in any case."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            "LOCKKIT['TASKS'] must be a dict such as {'TTL': 30, 'ONCE': 3600}, "
            f"got {type(raw).__name__}"
        )
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        name = str(key).lower()
        if name not in DEFAULTS:
            raise ConfigError(
                f"unknown setting LOCKKIT['TASKS'][{key!r}]; known: "
                f"{', '.join(n.upper() for n in DEFAULTS)}"
            )
        parsed[name] = check_option(name, value, f"LOCKKIT['TASKS'][{key!r}]")
    return parsed


def decide(given: Mapping[str, Any], setting: Mapping[str, Any], store_ttl: float) -> TaskOptions:
    """The options of a task: ``given`` (its decorator) > ``setting`` > :data:`DEFAULTS`."""
    got = {name: given.get(name, setting.get(name, default)) for name, default in DEFAULTS.items()}
    ttl = store_ttl if got["ttl"] is UNSET else got["ttl"]
    return TaskOptions(
        enabled=got["enabled"],
        ttl=ttl,
        on_duplicate=got["on_duplicate"],
        enqueue_lock=got["enqueue_lock"],
        once=got["once"],
        wait=got["wait"],
        enqueue_ttl=got["enqueue_ttl"],
        # A finished task's run lock must outlast a running one's (see lockkit_core.dedupe).
        remember=max(got["remember"], 2 * ttl),
    )
