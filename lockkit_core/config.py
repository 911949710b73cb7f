"""``LockKitConfig.from_mapping()``: the one settings parser every framework shares.

Precedence, the same everywhere: an explicit argument (``LockKit(url=..., options=...)``, the
keyword overrides of :meth:`LockKitConfig.from_mapping`) replaces the same setting of the
mapping, which replaces the default; "not given" is the :data:`UNSET` sentinel, never a falsy
value. ``OPTIONS`` is one setting: an explicit ``options=`` replaces it whole.

Inside the backend, each option has one value, wherever it is written: in the URL (its query
string, or the part that carries it: ``user:password@``, redis's ``/db``) or in ``OPTIONS``.
The same value in two places is accepted; two different values are a :class:`ConfigError`
naming both places (``Backend.parse_options`` in :mod:`lockkit_core.backends.base`),
because silently preferring either would put two processes that read different halves of the
configuration on two different stores.
"""

from __future__ import annotations

import enum
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeAlias

from .errors import ConfigError
from .lease import MIN_TTL
from .redact import redact_options, redact_url

__all__ = [
    "CORE_SETTINGS",
    "DEFAULT_TTL",
    "UNSET",
    "LockKitConfig",
    "Seconds",
    "check_lock_ttl",
    "check_seconds",
    "check_timeout",
    "check_ttl",
    "default_url",
    "parse_bool",
]


class _Unset(enum.Enum):
    """Sentinel for "not given", so that ``None`` and ``0`` stay meaningful values.

    A one-member enum, so that type checkers narrow ``x is UNSET`` (PEP 484's sentinel idiom).
    """

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Final = _Unset.UNSET

#: The type of a ``ttl``, ``timeout`` or ``wait`` argument: seconds (``int`` is accepted as a
#: ``float``), ``None`` (no lease / wait forever, as the argument documents), or left out
#: (:data:`UNSET`, the setting's value). Values are still checked at run time: a bad one is a
#: :class:`ConfigError` where it is passed.
Seconds: TypeAlias = "float | _Unset | None"

DEFAULT_TTL: Final = 30.0

#: The core settings every adapter reads (``LOCKKIT_URL``, ``LOCKKIT["URL"]``, ...).
CORE_SETTINGS: Final = ("URL", "NAMESPACE", "TTL", "AUTO_RENEW", "TIMEOUT", "OPTIONS")


def default_url() -> str:
    """``file://`` under the system temp dir: cross-process on one host, no server needed."""
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return "file://" + os.path.join(tempfile.gettempdir(), f"lockkit-{uid}")


#: what a number of seconds may be (a tuple: ``int | float`` would build a union per call,
#: and these checks run on every lock and acquire)
_NUMBER = (int, float)


def check_seconds(name: str, value: object, *, allow_none: bool) -> float | None:
    """Validate a duration in seconds: a positive finite number (or ``None`` if allowed)."""
    if value is None:
        if allow_none:
            return None
        raise ConfigError(f"{name} must be a positive number of seconds, got None")
    if isinstance(value, bool) or not isinstance(value, _NUMBER):
        raise ConfigError(
            f"{name} must be a positive number of seconds, got {type(value).__name__} {value!r}"
        )
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        hint = " (use None or -1 to wait forever)" if allow_none else ""
        raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}{hint}")
    return seconds


def check_ttl(value: object, name: str = "ttl") -> float:
    """Validate a lease length: a finite number of seconds, at least :data:`~.lease.MIN_TTL`."""
    if value is None:
        raise ConfigError(
            f"{name} must be a positive number of seconds, got None; a kit's default ttl is a "
            "lease, and a lock without one is asked for per lock: kit.lock(key, ttl=None)"
        )
    seconds = check_seconds(name, value, allow_none=False)
    assert seconds is not None
    if seconds < MIN_TTL:
        raise ConfigError(
            f"{name} must be at least {MIN_TTL:g} s, got {value!r}: the clock-drift margin "
            "(1% + 2 ms) would leave no time in which a grant is valid"
        )
    return seconds


def check_lock_ttl(value: object, name: str = "ttl") -> float | None:
    """Validate one lock's ttl: a lease (see :func:`check_ttl`), or None for no lease."""
    return None if value is None else check_ttl(value, name)


def check_timeout(value: object, name: str = "timeout") -> float | None:
    """Validate a wait: ``None`` or ``-1`` (wait forever, as ``threading.Lock``), ``0`` (do
    not wait) or a positive number of seconds. Returns None, 0.0 or the seconds."""
    if isinstance(value, bool):
        raise ConfigError(
            f"{name} must be a number of seconds, None or -1, got {value!r} "
            "(use blocking=False or timeout=0 not to wait)"
        )
    if value is None or (isinstance(value, _NUMBER) and value == -1):
        return None
    if isinstance(value, _NUMBER) and value == 0:
        return 0.0
    return check_seconds(name, value, allow_none=True)


def parse_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {"1", "true", "yes", "on"}:
        return True
    if isinstance(value, str) and value.strip().lower() in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")


def _parse_number(name: str, value: object) -> object:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from None
    return value


@dataclass(frozen=True, repr=False)
class LockKitConfig:
    """Settings for a :class:`~lockkit_core.LockKit`; build it with :meth:`from_mapping`.
    Its ``repr()`` hides credentials in the URL and ``options``."""

    url: str = field(default_factory=default_url)
    namespace: str = ""
    ttl: float = DEFAULT_TTL
    auto_renew: bool = True
    timeout: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            shown = redact_url(self.url) if isinstance(self.url, str) else self.url
            raise ConfigError(f"URL must be a non-empty string, got {shown!r}")
        if not isinstance(self.namespace, str):
            raise ConfigError(f"NAMESPACE must be a string, got {self.namespace!r}")
        # Normalised in place so that every reader sees a float ttl and None for "forever".
        object.__setattr__(self, "ttl", check_ttl(self.ttl))
        object.__setattr__(self, "timeout", check_timeout(self.timeout))
        if not isinstance(self.auto_renew, bool):
            raise ConfigError(f"AUTO_RENEW must be true or false, got {self.auto_renew!r}")
        if not isinstance(self.options, Mapping):
            raise ConfigError(f"OPTIONS must be a mapping, got {type(self.options).__name__}")

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, Any] | None = None, **overrides: Any
    ) -> LockKitConfig:
        """Build from ``{"URL": ..., "NAMESPACE": ..., "TTL": ..., "AUTO_RENEW": ...,
        "TIMEOUT": ..., "OPTIONS": {...}}`` (keys in any case); ``overrides`` (lower-case
        names, :data:`UNSET` skipped) win over the mapping. Unknown keys are an error."""
        values: dict[str, Any] = {}
        for raw_key, value in (mapping or {}).items():
            key = str(raw_key).upper()
            if key not in CORE_SETTINGS:
                raise ConfigError(
                    f"unknown lockkit setting {raw_key!r}; "
                    f"known settings: {', '.join(CORE_SETTINGS)}"
                )
            if key in values:
                raise ConfigError(f"lockkit setting {key} is given twice (in different case)")
            values[key] = value
        for name, value in overrides.items():
            if name.upper() not in CORE_SETTINGS:
                raise ConfigError(
                    f"unknown lockkit setting {name!r}; known settings: "
                    f"{', '.join(k.lower() for k in CORE_SETTINGS)}"
                )
            if value is not UNSET:
                values[name.upper()] = value
        kwargs: dict[str, Any] = {}
        if "URL" in values and values["URL"] is not None:
            kwargs["url"] = values["URL"]
        if "NAMESPACE" in values and values["NAMESPACE"] is not None:
            kwargs["namespace"] = values["NAMESPACE"]
        if "TTL" in values:
            kwargs["ttl"] = check_ttl(_parse_number("TTL", values["TTL"]), "TTL")
        if "AUTO_RENEW" in values:
            kwargs["auto_renew"] = parse_bool("AUTO_RENEW", values["AUTO_RENEW"])
        if "TIMEOUT" in values:
            raw = values["TIMEOUT"]
            kwargs["timeout"] = check_timeout(
                None if raw is None else _parse_number("TIMEOUT", raw)
            )
        if "OPTIONS" in values and values["OPTIONS"] is not None:
            if not isinstance(values["OPTIONS"], Mapping):
                raise ConfigError(
                    f"OPTIONS must be a mapping such as {{'socket_timeout': 2}}, "
                    f"got {type(values['OPTIONS']).__name__}"
                )
            kwargs["options"] = dict(values["OPTIONS"])
        return cls(**kwargs)

    def __repr__(self) -> str:
        return (
            f"LockKitConfig(url={redact_url(self.url)!r}, namespace={self.namespace!r}, "
            f"ttl={self.ttl!r}, auto_renew={self.auto_renew!r}, timeout={self.timeout!r}, "
            f"options={redact_options(self.options)!r})"
        )

    def replace(self, **changes: Any) -> LockKitConfig:
        """A copy with ``changes`` applied and validated."""
        return replace(self, **changes)
