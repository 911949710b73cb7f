"""``LockKit``: the Flask extension. It reads ``LOCKKIT_*`` from ``app.config``, keeps one
core :class:`lockkit_core.LockKit` and guard context per app in
``app.extensions["lockkit"]``, and stands for the current app's kit (``locks.lock(key)``)."""

from __future__ import annotations

import logging
import weakref
from typing import Any, Final

from blinker import Namespace
from flask import Flask, current_app

from lockkit_core import Admin, ConfigError, Lock, LockKitConfig
from lockkit_core import LockKit as CoreKit
from lockkit_core.config import CORE_SETTINGS, UNSET
from lockkit_core.guard import GUARD_SETTINGS, GuardContext, GuardSettings
from lockkit_core.rwlock import RWLock
from lockkit_core.semaphore import Semaphore
from lockkit_core.store_warnings import unshared_store_warnings

from .errors import PROBLEMS
from .release import watch
from .view_functions import BLUEPRINT_RULES, ViewFunctions

__all__ = ["EXTENSION_KEY", "LockKit", "LockKitState", "lock_lost", "state_of"]

log = logging.getLogger("lockkit.flask")

EXTENSION_KEY: Final = "lockkit"

#: Sent (sender: the app; ``lock``, ``route``, ``error``) when a route's lock was lost while
#: its view ran, or could not be released: the response stands, exclusion was not certain.
lock_lost = Namespace().signal("lockkit-lock-lost")


class LockKitState(GuardContext):
    """What one app's routes lock with; ``app.extensions["lockkit"]``."""

    @property
    def enabled(self) -> bool:
        """``LOCKKIT_ENABLED``: false makes every route rule a no-op."""
        return self.settings.enabled

    @property
    def wait(self) -> float:
        """``LOCKKIT_WAIT``: the default seconds a route waits for its lock."""
        return self.settings.wait

    @property
    def retry_after(self) -> int:
        """``LOCKKIT_RETRY_AFTER``: the ``Retry-After`` of a 409 or 503."""
        return self.settings.retry_after


def state_of(app: Flask) -> LockKitState:
    """The app's lockkit state; a clear error if the extension was never set up on it."""
    state = app.extensions.get(EXTENSION_KEY)
    if not isinstance(state, LockKitState):
        raise ConfigError(
            f"lockkit is not set up on the Flask app {app.name!r}: call "
            "lockkit_flask.LockKit(app), or LockKit().init_app(app) in your app factory"
        )
    return state


def _signal_lost(app: Flask) -> Any:
    def send(lock: Lock, route: str, error: BaseException) -> None:
        lock_lost.send(app, lock=lock, route=route, error=error)

    return send


class LockKit:
    """Per-route locks for Flask: ``LockKit(app)`` or ``LockKit()`` + ``init_app(app)``.

    Settings come from the constructor, else ``app.config["LOCKKIT_*"]``, else the defaults:
    ``URL``, ``NAMESPACE``, ``TTL``, ``AUTO_RENEW``, ``TIMEOUT``, ``OPTIONS`` as in
    :class:`lockkit_core.LockKitConfig`; ``ENABLED`` (true; false makes ``@lock_route`` a
    no-op), ``WAIT`` (0: how long a route waits for its lock before answering 409) and
    ``RETRY_AFTER`` (1: seconds in the ``Retry-After`` of a 409 or 503), ``MAX_KEY_BYTES``
    (512: a longer request-built key answers 400) and ``STREAM_MAX_HOLD`` (60: seconds a
    streamed response keeps its lock; ``None``: until closed). ``SECRET_KEY`` hashes the
    credentials a key template names.
    One extension may serve several apps; each gets its own store connection, closed when
    the app is garbage collected or the interpreter exits. Inside an app context the
    extension is that app's kit: ``locks.lock("report")``, ``locks.admin``.
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
        max_key_bytes: Any = UNSET,
        stream_max_hold: Any = UNSET,
    ) -> None:
        self._core_overrides = {
            "url": url,
            "namespace": namespace,
            "ttl": ttl,
            "auto_renew": auto_renew,
            "timeout": timeout,
            "options": options,
        }
        self._guard_overrides = {
            "ENABLED": enabled,
            "WAIT": wait,
            "RETRY_AFTER": retry_after,
            "MAX_KEY_BYTES": max_key_bytes,
            "STREAM_MAX_HOLD": stream_max_hold,
        }
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Read the app's settings and open its kit (no connection is made until first use)."""
        if EXTENSION_KEY in app.extensions:
            raise ConfigError(f"lockkit is already set up on the Flask app {app.name!r}")
        settings = app.config.get_namespace("LOCKKIT_", lowercase=False, trim_namespace=True)
        unknown = sorted(set(settings) - {*CORE_SETTINGS, *GUARD_SETTINGS})
        if unknown:
            raise ConfigError(
                f"unknown setting {', '.join('LOCKKIT_' + k for k in unknown)} in "
                f"app.config; known: {', '.join('LOCKKIT_' + k for k in CORE_SETTINGS)}, "
                f"{', '.join('LOCKKIT_' + k for k in GUARD_SETTINGS)}"
            )
        core = {k: v for k, v in settings.items() if k in CORE_SETTINGS}
        config = LockKitConfig.from_mapping(core, **self._core_overrides)
        guard = {k: settings.get(k, UNSET) for k in GUARD_SETTINGS}
        guard.update({k: v for k, v in self._guard_overrides.items() if v is not UNSET})
        guard_settings = GuardSettings.from_mapping(guard, "LOCKKIT_{}")
        # None (os.environ.get of an unset variable) is no URL: the default applies.
        url_given = settings.get("URL") is not None or self._core_overrides["url"] not in (
            UNSET,
            None,
        )
        for warning in unshared_store_warnings(config, url_given=url_given, setting="LOCKKIT_URL"):
            log.warning("%s (Flask app %r)", warning, app.name)
        kit = CoreKit(config=config)
        try:
            # @lock_route written above @app.route leaves the bare view registered: the
            # app's view functions find its locked wrapper (also for views registered
            # before now), and check every rule against the store.
            views = ViewFunctions(app, kit)
            for blueprint in app.blueprints.values():
                for rule in getattr(blueprint, BLUEPRINT_RULES, ()):
                    rule.check_store(kit, f"blueprint {blueprint.name!r}")
        except ConfigError:
            kit.close()
            raise
        app.view_functions = views
        watch(app)
        app_config = app.config  # not the app: the state must not keep it alive
        app.extensions[EXTENSION_KEY] = LockKitState(
            kit, guard_settings, log, PROBLEMS, on_lost=[_signal_lost(app)],
            secret=lambda: app_config.get("SECRET_KEY"),
        )  # fmt: skip
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

    def lock(self, key: str, **options: Any) -> Lock:
        """``kit.lock(key, ...)`` on the current app's kit."""
        return self.kit.lock(key, **options)

    def rwlock(self, key: str) -> RWLock:
        """``kit.rwlock(key)`` on the current app's kit."""
        return self.kit.rwlock(key)

    def semaphore(self, key: str, limit: int, **options: Any) -> Semaphore:
        """``kit.semaphore(key, limit)`` on the current app's kit."""
        return self.kit.semaphore(key, limit, **options)

    @property
    def admin(self) -> Admin:
        """The operator API (list / info / force_release) on the current app's kit."""
        return self.kit.admin
