"""The settings every web adapter reads the same way: ``ENABLED``, ``WAIT``, ``RETRY_AFTER``,
``MAX_KEY_BYTES`` and ``STREAM_MAX_HOLD``.

Flask reads them as ``app.config["LOCKKIT_WAIT"]``, Django as ``LOCKKIT["WAIT"]``; a value
from the environment may be a string (``"2.5"``, ``"false"``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..config import UNSET, check_timeout, parse_bool
from ..errors import ConfigError

__all__ = ["GUARD_SETTINGS", "GuardSettings", "check_request_wait"]

GUARD_SETTINGS: Final = ("ENABLED", "WAIT", "RETRY_AFTER", "MAX_KEY_BYTES", "STREAM_MAX_HOLD")
#: A request-built key longer than this (UTF-8 bytes) answers 400: keys are stored, listed
#: and logged, and each distinct one leaves per-key state (a fence counter) behind.
DEFAULT_MAX_KEY_BYTES: Final = 512
#: Seconds a streamed response may hold its lock while the client reads.
DEFAULT_STREAM_MAX_HOLD: Final = 60.0


def _number(value: object) -> object:
    """``"2.5"`` (from the environment) means 2.5; anything else is left for the check."""
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        return value


def check_request_wait(value: object, name: str = "wait") -> float:
    """A request's wait for its lock: 0 (answer 409 at once) or a finite number of seconds.

    Waiting forever (``None`` or ``-1``, which ``kit.lock()`` allows) is refused: the request
    would hold a server worker, and its client, for as long as another request holds the key.
    """
    seconds = check_timeout(_number(value), name)
    if seconds is None:
        raise ConfigError(
            f"{name} is {value!r}, which makes a request wait forever for its lock and holds "
            "a server worker all the while; give a number of seconds below your server's "
            "request timeout (e.g. 5), or 0 to answer 409 at once"
        )
    return seconds


def _retry_after(value: object, name: str) -> int:
    number = _number(value)
    seconds = float(number) if isinstance(number, int | float) else math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"{name} must be whole seconds >= 0, got {value!r}")
    return math.ceil(seconds)


def _max_key_bytes(value: object, name: str) -> int:
    number = _number(value)
    if isinstance(value, bool) or not isinstance(number, int | float) or number != int(number):
        raise ConfigError(f"{name} must be a whole number of bytes, got {value!r}")
    if number < 16:
        raise ConfigError(f"{name} must be at least 16 (bytes of a lock key), got {value!r}")
    return int(number)


def _stream_max_hold(value: object, name: str) -> float | None:
    if value is None:
        return None  # said explicitly: a stream holds its lock until it is closed
    number = _number(value)
    seconds = float(number) if isinstance(number, int | float) else math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(
            f"{name} must be a number of seconds > 0 (or None: hold until the stream is "
            f"closed, however slowly the client reads), got {value!r}"
        )
    return seconds


@dataclass(frozen=True)
class GuardSettings:
    """Whether routes lock at all, their default wait, the ``Retry-After`` of a refusal, the
    longest key a request may build, and how long a stream may hold its lock."""

    enabled: bool = True
    wait: float = 0.0
    retry_after: int = 1
    max_key_bytes: int = DEFAULT_MAX_KEY_BYTES
    stream_max_hold: float | None = DEFAULT_STREAM_MAX_HOLD

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], name: str = "LOCKKIT_{}") -> GuardSettings:
        """Parse :data:`GUARD_SETTINGS` (missing or :data:`UNSET`: the default);
        ``name`` formats a setting's name for messages."""
        given = {k: v for k, v in values.items() if v is not UNSET}
        return cls(
            enabled=parse_bool(name.format("ENABLED"), given["ENABLED"])
            if "ENABLED" in given
            else True,
            wait=check_request_wait(given["WAIT"], name.format("WAIT")) if "WAIT" in given else 0.0,
            retry_after=_retry_after(given["RETRY_AFTER"], name.format("RETRY_AFTER"))
            if "RETRY_AFTER" in given
            else 1,
            max_key_bytes=_max_key_bytes(given["MAX_KEY_BYTES"], name.format("MAX_KEY_BYTES"))
            if "MAX_KEY_BYTES" in given
            else DEFAULT_MAX_KEY_BYTES,
            stream_max_hold=_stream_max_hold(
                given["STREAM_MAX_HOLD"], name.format("STREAM_MAX_HOLD")
            )
            if "STREAM_MAX_HOLD" in given
            else DEFAULT_STREAM_MAX_HOLD,
        )
