"""``LockKit``: the Flask extension. It reads ``LOCKKIT_*`` from ``app.config`` and keeps one
core :class:`lockkit_core.LockKit` per app in ``app.extensions["lockkit"]``."""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from flask import Flask, current_app

from lockkit_core import ConfigError, LockKitConfig
from lockkit_core import LockKit as CoreKit
from lockkit_core.config import UNSET, check_timeout

__all__ = ["EXTENSION_KEY", "LockKit", "LockKitState", "state_of"]

log = logging.getLogger("lockkit.flask")

EXTENSION_KEY: Final = "lockkit"
_CORE_SETTINGS = ("URL", "NAMESPACE", "TTL", "AUTO_RENEW", "TIMEOUT", "OPTIONS")
_FLASK_SETTINGS = ("ENABLED", "WAIT", "RETRY_AFTER")


@dataclass
class LockKitState:
    """What one app's routes lock with; ``app.extensions["lockkit"]``."""

    kit: CoreKit
    enabled: bool
    wait: float | None
    retry_after: int
    counts: Counter[str] = field(default_factory=Counter)
    _counts_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, event: str) -> None:
        """Count a refused or skipped request (``busy``, ``unavailable``, ``fail_open``)."""
        with self._counts_lock:
            self.counts[event] += 1


def state_of(app: Flask) -> LockKitState:
    """The app's lockkit state; a clear error if the extension was never set up on it."""
    state = app.extensions.get(EXTENSION_KEY)
    if not isinstance(state, LockKitState):
        raise ConfigError(
            f"lockkit is not set up on the Flask app {app.name!r}: call "
            "lockkit_flask.LockKit(app), or LockKit().init_app(app) in your app factory"
        )
    return state


def _parse_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")


def _number(value: object) -> object:
    """A setting read from the environment is a string: ``"2.5"`` means 2.5 seconds."""
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        return value  # left for the check to reject with its own message


def _parse_retry_after(value: object) -> int:
    number = _number(value)
    seconds = float(number) if isinstance(number, int | float) else math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"LOCKKIT_RETRY_AFTER must be whole seconds >= 0, got {value!r}")
    return math.ceil(seconds)


class LockKit:
    """Per-route locks for Flask: ``LockKit(app)`` or ``LockKit()`` + ``init_app(app)``.

    Settings come from the constructor, else ``app.config["LOCKKIT_*"]``, else the defaults:
    ``URL``, ``NAMESPACE``, ``TTL``, ``AUTO_RENEW``, ``TIMEOUT``, ``OPTIONS`` as in
    :class:`lockkit_core.LockKitConfig`; ``ENABLED`` (true; false makes ``@lock_route`` a
    no-op), ``WAIT`` (0: how long a route waits for its lock before answering 409) and
    ``RETRY_AFTER`` (1: seconds in the ``Retry-After`` of a 409 or 503).
    One extension may serve several apps; each gets its own store connection, closed when
    the app is garbage collected or the interpreter exits.
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        url: Any = UNSET,
        namespace: Any = UNSET,
        ttl: Any = UNSET,
        auto_renew: Any = UNSET,
        timeout: Any = UNSET,
        options: Any = UNSET,
        enabled: Any = UNSET,
        wait: Any = UNSET,
        retry_after: Any = UNSET,
    ) -> None:
        self._core_overrides = {
            "url": url,
            "namespace": namespace,
            "ttl": ttl,
            "auto_renew": auto_renew,
            "timeout": timeout,
            "options": options,
        }
        self._flask_overrides = {"ENABLED": enabled, "WAIT": wait, "RETRY_AFTER": retry_after}
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Read the app's settings and open its kit (no connection is made until first use)."""
        if EXTENSION_KEY in app.extensions:
            raise ConfigError(f"lockkit is already set up on the Flask app {app.name!r}")
        settings = app.config.get_namespace("LOCKKIT_", lowercase=False, trim_namespace=True)
        unknown = sorted(set(settings) - {*_CORE_SETTINGS, *_FLASK_SETTINGS})
        if unknown:
            raise ConfigError(
                f"unknown setting {', '.join('LOCKKIT_' + k for k in unknown)} in "
                f"app.config; known: {', '.join('LOCKKIT_' + k for k in _CORE_SETTINGS)}, "
                f"{', '.join('LOCKKIT_' + k for k in _FLASK_SETTINGS)}"
            )
        core = {k: v for k, v in settings.items() if k in _CORE_SETTINGS}
        config = LockKitConfig.from_mapping(core, **self._core_overrides)
        flask_settings = {k: settings.get(k, UNSET) for k in _FLASK_SETTINGS}
        flask_settings.update({k: v for k, v in self._flask_overrides.items() if v is not UNSET})
        enabled = flask_settings["ENABLED"]
        wait = flask_settings["WAIT"]
        retry_after = flask_settings["RETRY_AFTER"]
        kit = CoreKit(config=config)
        app.extensions[EXTENSION_KEY] = LockKitState(
            kit=kit,
            enabled=True if enabled is UNSET else _parse_bool("LOCKKIT_ENABLED", enabled),
            wait=0.0 if wait is UNSET else check_timeout(_number(wait), "LOCKKIT_WAIT"),
            retry_after=1 if retry_after is UNSET else _parse_retry_after(retry_after),
        )
        # Not on app-context teardown: that runs after every request. The kit lives as long
        # as its app; weakref.finalize also runs at interpreter exit.
        weakref.finalize(app, kit.close)
        log.debug("lockkit set up on %s: %r", app.name, kit)

    def kit_for(self, app: Flask | None = None) -> CoreKit:
        """The core kit of ``app`` (default: the current app), for locks inside views."""
        return state_of(app if app is not None else current_app).kit

    @property
    def kit(self) -> CoreKit:
        """The current app's core kit: ``with ext.kit.lock("report"): ...``."""
        return self.kit_for()
