"""List, inspect and force-release locks: the one admin layer behind the CLI and frameworks."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from . import process
from .backends.base import Backend, Capability, Lease, capability_names
from .errors import NotSupported
from .keys import check_key, namespaced

__all__ = ["Admin", "BackendInfo", "KitView", "LockInfo", "age_text"]


def age_text(seconds: float | None) -> str:
    """A lock's age for people: ``4.2 s``, ``12m 05s``, ``3h 02m``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


class KitView(Protocol):
    """What the admin layer needs of a kit: its store and namespace (a ``LockKit`` is one)."""

    @property
    def backend(self) -> Backend: ...

    @property
    def namespace(self) -> str: ...


@dataclass(frozen=True)
class LockInfo:
    """One held lock. ``key`` is relative to the kit's namespace; ``owner_hint`` is the first
    8 hex digits of the owner token, enough to tell holders apart, useless for releasing."""

    key: str
    stored_key: str
    owner_hint: str
    token: int | None
    ttl_remaining: float | None
    holder: str | None
    #: when the holder got it (seconds since the epoch, the store's clock where it has one)
    started: float | None = None
    #: how many wait for it, where the store can count them (None: it cannot)
    waiters: int | None = None

    def age(self, now: float | None = None) -> float | None:
        """Seconds it has been held at ``now`` (default: this host's clock), never below 0."""
        if self.started is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.started)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class BackendInfo:
    """What a store is and what it can guarantee."""

    url: str
    scheme: str
    grade: str
    capabilities: list[str]

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


class Admin:
    """``kit.admin``: operations for operators, not for application code paths."""

    def __init__(self, kit: KitView) -> None:
        self._kit = kit

    def _relative(self, lease: Lease) -> LockInfo:
        ns = self._kit.namespace
        key = lease.key[len(ns) + 1 :] if ns and lease.key.startswith(ns + ":") else lease.key
        return LockInfo(
            key,
            lease.key,
            lease.owner_hint,
            lease.token,
            lease.ttl_remaining,
            lease.holder,
            lease.started,
            lease.waiters,
        )

    def list(self, prefix: str = "") -> list[LockInfo]:
        """Held locks whose key starts with ``prefix``, sorted by key."""
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be str, got {type(prefix).__name__}")
        process.check_fork()
        backend = self._kit.backend
        if Capability.LIST not in backend.capabilities:
            raise NotSupported(f"the {backend.url.scheme}:// backend cannot list its locks")
        ns = self._kit.namespace
        stored = f"{ns}:{prefix}" if ns else prefix
        return [self._relative(lease) for lease in backend.list(stored)]

    def info(self, key: str) -> LockInfo | None:
        """The lock on ``key``, or None if it is free."""
        process.check_fork()
        lease = self._kit.backend.info(namespaced(self._kit.namespace, check_key(key)))
        return None if lease is None else self._relative(lease)

    def force_release(self, key: str) -> bool:
        """Free ``key`` whoever holds it; False if it was already free.

        The holder is not told until it next renews, extends, releases or calls ``check()``
        after its lease would have ended: use fencing tokens where that matters.
        """
        process.check_fork()
        return self._kit.backend.force_release(namespaced(self._kit.namespace, check_key(key)))

    def backend_info(self) -> BackendInfo:
        """The store's URL (secrets hidden), safety grade and capability flags."""
        backend = self._kit.backend
        caps = capability_names(backend.capabilities)
        return BackendInfo(backend.describe(), backend.url.scheme, str(backend.grade), caps)
