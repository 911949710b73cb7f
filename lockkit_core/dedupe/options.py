"""The lock options of one task: their names, defaults, validation and how they are decided.

Every task adapter takes the same options under the same names (decorator keywords; Celery's
``lockkit_<name>`` task attributes and app settings; Django's ``LOCKKIT["TASKS"]`` in upper
case) and decides them here: keyword > framework setting > :data:`DEFAULTS`. A name that is
not an option is a :class:`ConfigError` naming the known ones, wherever it was given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..config import UNSET, check_ttl
from ..errors import ConfigError

__all__ = [
    "DEFAULTS",
    "ON_DUPLICATE",
    "TaskOptions",
    "check_names",
    "check_option",
    "decide",
    "given_options",
]

#: every option and its default (keyword > framework setting > this); ``ttl`` UNSET means
#: the store's TTL (30 s unless the settings say otherwise)
DEFAULTS: Final[Mapping[str, Any]] = {
    "enabled": True,
    "ttl": UNSET,
    "on_duplicate": "skip",
    "enqueue_lock": True,
    "once": None,
    "wait": 0.0,
    "enqueue_ttl": 3600.0,
    "remember": 86400.0,
}

#: what a duplicate gets: ``skip`` answers it with the original task, ``retry`` queues it
#: and runs it after the original, ``raise`` raises :class:`TaskLocked`
ON_DUPLICATE: Final = ("skip", "retry", "raise")


@dataclass(frozen=True)
class TaskOptions:
    """The lock options of one task, decided (keyword > framework setting > default)."""

    enabled: bool
    ttl: float
    on_duplicate: str
    enqueue_lock: bool
    once: float | None
    wait: float
    enqueue_ttl: float
    remember: float


def check_names(names: Mapping[str, Any] | set[str], where: str, spell: str = "{}") -> None:
    """Raise :class:`ConfigError` if a name is not an option; ``spell`` formats the known
    names as the user writes them there (``"lockkit_{}"``, ``"{}"`` upper-cased by caller)."""
    unknown = sorted(str(n) for n in names if str(n) not in DEFAULTS)
    if unknown:
        known = ", ".join(spell.format(n) for n in DEFAULTS)
        listed = ", ".join(spell.format(n) for n in unknown)
        raise ConfigError(f"unknown task lock option {listed} in {where}; known: {known}")


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
    if name == "ttl" and value is UNSET:
        return UNSET
    return check_ttl(value, label)


def given_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options a ``@locked_task`` decorator was given (those left ``UNSET`` out), each
    checked by :func:`check_option`. ``options`` names every option, given or not, so a
    decorator that lacks one fails here rather than silently passing it on."""
    assert set(options) == set(DEFAULTS), sorted(set(options) ^ set(DEFAULTS))
    return {name: check_option(name, v) for name, v in options.items() if v is not UNSET}


def decide(
    given: Mapping[str, Any],
    setting: Mapping[str, Any],
    store_ttl: float,
    *,
    where: str = "the task's options",
) -> TaskOptions:
    """The options of a task: ``given`` (its decorator, or one call) > ``setting`` (the
    framework's) > :data:`DEFAULTS`, each value checked by :func:`check_option`."""
    got: dict[str, Any] = {}
    for name, default in DEFAULTS.items():
        value = given.get(name, UNSET)
        if value is UNSET:
            value = setting.get(name, UNSET)
        got[name] = default if value is UNSET else check_option(name, value, f"{name} ({where})")
    ttl = store_ttl if got["ttl"] is UNSET else got["ttl"]
    return TaskOptions(
        enabled=got["enabled"],
        ttl=ttl,
        on_duplicate=got["on_duplicate"],
        enqueue_lock=got["enqueue_lock"],
        once=got["once"],
        wait=got["wait"],
        enqueue_ttl=got["enqueue_ttl"],
        remember=got["remember"],
    )
