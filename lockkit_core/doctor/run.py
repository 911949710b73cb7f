"""``diagnose(url)``: the store the URL names, checked by its family's module."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from ..backends.base import Backend
from ..config import DEFAULT_TTL, check_ttl
from ..errors import LockKitError
from ..registry import create_backend
from .findings import Finding, Level, Report

__all__ = ["diagnose"]


#: backend class name -> (module of this package, check function), imported when used
_CHECKS = {
    "RedisBackend": ("redis", "check_redis"),
    "RedlockBackend": ("redis", "check_redlock"),
    "ZooKeeperBackend": ("consensus", "check_zookeeper"),
    "EtcdBackend": ("consensus", "check_etcd"),
    "PostgresBackend": ("sql", "check_postgres"),
    "MySQLBackend": ("sql", "check_mysql"),
}


def _checks(backend: Backend) -> Callable[[Any, float], list[Finding]] | None:
    """The check function for ``backend``'s family, imported only when it is used."""
    found = _CHECKS.get(type(backend).__name__)
    if found is None:
        return None
    module, name = found
    checks: Callable[[Any, float], list[Finding]] = getattr(
        importlib.import_module(f"{__package__}.{module}"), name
    )
    return checks


def diagnose(
    url: str, options: Mapping[str, Any] | None = None, *, ttl: float = DEFAULT_TTL
) -> Report:
    """Check the live store ``url`` (with backend ``options``) for locks of ``ttl`` seconds.
    A bad URL or option raises :class:`~lockkit_core.errors.ConfigError`; a store that
    cannot be reached is an ``unsafe`` finding, not an exception."""
    ttl = check_ttl(ttl)
    backend = create_backend(url, options)
    try:
        checks = _checks(backend)
        if checks is None:
            found = [
                Finding(
                    Level.OK,
                    "store",
                    f"nothing to check on {backend.url.scheme}:// (grade {backend.grade}): it "
                    "has no server settings that weaken locks",
                )
            ]
        else:
            try:
                found = checks(backend, ttl)
            except LockKitError as exc:
                found = [
                    Finding(
                        Level.UNSAFE,
                        "reachable",
                        f"cannot check: {exc}",
                        "start the store, or fix the URL and its options",
                    )
                ]
        return Report(backend.describe(), ttl, found)
    finally:
        backend.close()
