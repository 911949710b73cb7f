"""The options of a lock handle, checked once: what ``kit.lock()``, ``kit.lock_maker()``,
``kit.rwlock()``, ``kit.semaphore()`` and ``@kit.locked`` were given, against the kit's
settings and what its store can do, as the keyword arguments of a handle."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .backends.base import Capability
from .config import UNSET, Seconds, check_lock_ttl, check_timeout
from .errors import ConfigError, NotSupported
from .lock import OnLost

if TYPE_CHECKING:
    from .kit import LockKit

__all__ = ["check_owner", "lock_options", "place_options"]


def check_owner(owner: object) -> None:
    """Refuse anything but an owner token (32 characters) to adopt an acquisition with."""
    if not isinstance(owner, str) or len(owner) != 32:
        raise ConfigError("owner must be the 32-character token of an existing acquisition")


def lock_options(
    kit: LockKit,
    ttl: Seconds,
    timeout: Seconds,
    auto_renew: Any,
    fair: bool,
    on_lost: OnLost | Iterable[OnLost] | None,
    owner: str | None,
) -> dict[str, Any]:
    """A handle's options: those left out (``UNSET``) from ``cfg``, each checked, with a
    clear error for one ``backend`` cannot keep (a ttl without leases, fair without a queue)."""
    cfg, backend = kit.config, kit.backend
    caps = backend.capabilities
    # session-bound only: no lease at all, the lock ends with the store session
    leases = Capability.TTL in caps or Capability.NO_LEASE not in caps
    # A store without leases (advisory locks) holds for the session: the kit's default
    # ttl, a lease length, has nothing to apply to there.
    default_ttl = cfg.ttl if leases else None
    real_ttl = default_ttl if ttl is UNSET else check_lock_ttl(ttl)
    if real_ttl is None and Capability.NO_LEASE not in backend.capabilities:
        raise NotSupported(
            f"the {backend.url.scheme}:// backend cannot hold a lock without a lease "
            "(ttl=None): it frees a lock only when its lease runs out, so a holder that "
            "crashed would keep it for ever. Give a ttl (auto_renew keeps it held), or "
            "use memory:// or file://, which free a lock when its holder process ends"
        )
    if real_ttl is not None and not leases:
        raise NotSupported(
            f"{backend.describe()} has no leases: a lock lasts as long as the session "
            "that took it, so a ttl could not be kept. Leave ttl out (or pass ttl=None), or "
            "use a store with leases"
        )
    real_timeout = cfg.timeout if timeout is UNSET else check_timeout(timeout)
    renew = cfg.auto_renew if auto_renew is UNSET else auto_renew
    if not isinstance(renew, bool):
        raise ConfigError(f"auto_renew must be True or False, got {renew!r}")
    if not isinstance(fair, bool):
        raise ConfigError(f"fair must be True or False, got {fair!r}")
    if fair and Capability.FAIR not in backend.capabilities:
        raise NotSupported(
            f"the {backend.url.scheme}:// backend cannot queue waiters in order; "
            "drop fair=True or use memory://"
        )
    if owner is not None:
        check_owner(owner)
    callbacks: list[OnLost]
    if on_lost is None:
        callbacks = []
    elif callable(on_lost):
        callbacks = [on_lost]
    else:
        callbacks = list(on_lost)
        if not all(callable(c) for c in callbacks):
            raise ConfigError("on_lost must be a callable or a list of callables")
    return {
        "ttl": real_ttl,
        "timeout": real_timeout,
        "auto_renew": renew,
        "fair": fair,
        "on_lost": callbacks,
        "owner": owner,
        "labels": kit.labels,
    }


def place_options(options: dict[str, Any], timeout: Seconds, owner: str | None) -> dict[str, Any]:
    """``options`` (of :func:`lock_options`) with one place's ``timeout`` and ``owner``
    checked as ``kit.lock()`` checks them."""
    if owner is not None:
        check_owner(owner)
    wait = options["timeout"] if timeout is UNSET else check_timeout(timeout)
    return {**options, "timeout": wait, "owner": owner}
