"""``settings.LOCKKIT``: parsed by the core's :class:`~lockkit_core.LockKitConfig`, plus the
adapter's own keys, into one :class:`LockKitState` per settings value.

::

    LOCKKIT = {
        "URL": "redis://127.0.0.1:6379/0",   # core: URL NAMESPACE TTL AUTO_RENEW TIMEOUT OPTIONS
        "NAMESPACE": "shop",
        "ENABLED": True,                     # False: views and middleware rules lock nothing
        "WAIT": 0,                           # seconds a locked view waits before answering 409
        "RETRY_AFTER": 1,                    # the Retry-After of a 409 or 503
        "MAX_KEY_BYTES": 512,                # a longer key built from a request answers 400
        "STREAM_MAX_HOLD": 60,               # seconds a streamed response keeps its lock
        "MIDDLEWARE": {"RULES": [{"PATH": r"^/orders/(?P<order_id>\\d+)/pay/$",
                                  "METHODS": ["POST"], "KEY": "order:{order_id}"}]},
        "TASKS": {"TTL": 30, "ONCE": None},  # @locked_task defaults (lockkit_django.tasks)
        "IDEMPOTENCY": {"PATHS": [r"^/api/"], "EXPIRES": 86400},   # Idempotency-Key
    }

The state is rebuilt when the setting changes (``setting_changed``, so ``override_settings``
works in tests) and compared with the value it was built from, so a first caller never fixes
it for everyone after.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from django.conf import settings

from lockkit_core import ConfigError, LockKitConfig
from lockkit_core import LockKit as CoreKit
from lockkit_core.config import CORE_SETTINGS
from lockkit_core.guard import GUARD_SETTINGS, Counts, GuardContext, GuardSettings

from .idempotency.settings import IdempotencySettings, parse_idempotency
from .path_rules import PathRule, rule_from_mapping
from .signals import lock_lost
from .task_options import parse_tasks

__all__ = [
    "ADAPTER_SETTINGS",
    "CORE_SETTINGS",
    "AdapterSettings",
    "LockKitState",
    "get_kit",
    "lockkit_state",
    "parse_settings",
    "reset_state",
    "secret_key",
]

ADAPTER_SETTINGS: Final = (*GUARD_SETTINGS, "MIDDLEWARE", "TASKS", "IDEMPOTENCY")

log = logging.getLogger("lockkit.django")


@dataclass(frozen=True)
class AdapterSettings:
    """What ``settings.LOCKKIT`` says beyond the core's keys."""

    config: LockKitConfig
    guard: GuardSettings = field(default_factory=GuardSettings)
    rules: tuple[PathRule, ...] = ()
    tasks: Mapping[str, Any] = field(default_factory=dict)
    idempotency: IdempotencySettings = field(default_factory=IdempotencySettings)

    @property
    def wait(self) -> float:
        """``WAIT``: seconds a locked request waits for its lock (default 0)."""
        return self.guard.wait

    @property
    def retry_after(self) -> int:
        """``RETRY_AFTER``: the ``Retry-After`` of a 409 or 503 (default 1)."""
        return self.guard.retry_after


def _rules(value: object) -> tuple[PathRule, ...]:
    if not isinstance(value, Mapping):
        raise ConfigError(
            "LOCKKIT['MIDDLEWARE'] must be a dict such as {'RULES': [{'PATH': r'^/pay/', "
            f"'KEY': 'order:{{order_id}}'}}]}}, got {type(value).__name__}"
        )
    unknown = sorted(str(k) for k in value if str(k).upper() != "RULES")
    if unknown:
        raise ConfigError(f"unknown LOCKKIT['MIDDLEWARE'] setting {unknown}; known: RULES")
    rules: object = next((v for k, v in value.items() if str(k).upper() == "RULES"), [])
    if isinstance(rules, str | bytes | Mapping) or not isinstance(rules, list | tuple):
        raise ConfigError("LOCKKIT['MIDDLEWARE']['RULES'] must be a list of rule dicts")
    compiled = []
    for i, rule in enumerate(rules):
        where = f"LOCKKIT['MIDDLEWARE']['RULES'][{i}]"
        if not isinstance(rule, Mapping):
            raise ConfigError(
                f"{where} must be a dict with PATH and KEY, got {type(rule).__name__}"
            )
        compiled.append(rule_from_mapping(rule, where))
    return tuple(compiled)


def parse_settings(raw: object) -> AdapterSettings:
    """Validate a ``LOCKKIT`` value; every problem is a :class:`ConfigError` naming it."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"settings.LOCKKIT must be a dict such as {{'URL': 'redis://127.0.0.1:6379/0'}}, "
            f"got {type(raw).__name__}"
        )
    core: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in raw.items():
        name = str(key).upper()
        if name in ADAPTER_SETTINGS:
            own[name] = value
        elif name in CORE_SETTINGS:
            core[key] = value
        else:
            raise ConfigError(
                f"unknown setting LOCKKIT[{key!r}]; known: "
                f"{', '.join((*CORE_SETTINGS, *ADAPTER_SETTINGS))}"
            )
    config = LockKitConfig.from_mapping(core)
    return AdapterSettings(
        config=config,
        guard=GuardSettings.from_mapping(own, "LOCKKIT['{}']"),
        rules=_rules(own["MIDDLEWARE"]) if "MIDDLEWARE" in own else (),
        tasks=parse_tasks(own["TASKS"]) if "TASKS" in own else {},
        idempotency=parse_idempotency(own.get("IDEMPOTENCY")),
    )


@dataclass
class LockKitState:
    """The kit and adapter settings of one ``LOCKKIT`` value, and the guard they make."""

    settings: AdapterSettings
    kit: CoreKit
    guard: GuardContext = field(init=False)

    def __post_init__(self) -> None:
        self.guard = GuardContext(
            self.kit, self.settings.guard, log, on_lost=[_signal_lost], secret=secret_key
        )

    @property
    def counts(self) -> Counts:
        """Refused, unlocked and lost requests by event (``busy``, ``unavailable``, ...)."""
        return self.guard.counts

    def count(self, event: str) -> None:
        """Count one ``event``."""
        self.guard.counts.add(event)


def secret_key() -> str | None:
    """Django's ``SECRET_KEY``, read when a credential is first hashed."""
    return getattr(settings, "SECRET_KEY", None)


def _signal_lost(lock: Any, route: str, error: BaseException) -> None:
    lock_lost.send(sender=LockKitState, lock=lock, route=route, error=error)


@dataclass
class _Cache:
    raw: Any
    state: LockKitState


_cache: _Cache | None = None
_cache_lock = threading.Lock()


def _current_raw() -> Any:
    return getattr(settings, "LOCKKIT", None)


def lockkit_state() -> LockKitState:
    """The state for the current ``settings.LOCKKIT``, built on first use of that value."""
    global _cache  # noqa: PLW0603 - a cache keyed by the settings value, never first-wins
    raw = _current_raw()
    cache = _cache
    if cache is not None and cache.raw == raw:
        return cache.state
    with _cache_lock:
        cache = _cache
        if cache is not None and cache.raw == raw:
            return cache.state
        parsed = parse_settings(raw)
        # A replaced kit is not closed here: requests in flight still release through it;
        # the core closes its store once the last of its handles is gone.
        state = LockKitState(parsed, CoreKit(config=parsed.config))
        _cache = _Cache(copy.deepcopy(raw), state)
        return state


def reset_state(**_: Any) -> None:
    """Forget the state, so the next request reads ``settings.LOCKKIT`` again."""
    global _cache  # noqa: PLW0603
    with _cache_lock:
        _cache = None


def get_kit() -> CoreKit:
    """The :class:`lockkit_core.LockKit` of ``settings.LOCKKIT``, for locks inside code:
    ``with get_kit().lock(f"export:{user.pk}", timeout=5): ...``."""
    return lockkit_state().kit
