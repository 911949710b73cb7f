"""Scheme -> backend class: the built-ins, then the ``lockkit.backends`` entry-point group.

Built-in backends are named here as import paths, so that a driver (redis-py, kazoo, ...) is
imported only when its scheme is used. A third-party package adds a backend by declaring::

    [project.entry-points."lockkit.backends"]
    mystore = "mypackage.lockkit_backend:MyStoreBackend"
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from .backends.base import Backend
from .errors import BackendNotInstalled, ConfigError
from .url import LockURL, parse_url

__all__ = ["backend_class", "check_installed", "create_backend", "known_schemes"]

_BUILTIN: dict[str, str] = {
    "memory": "lockkit_core.backends.memory:MemoryBackend",
    "file": "lockkit_core.backends.file:FileBackend",
    "redis": "lockkit_core.backends.redis:RedisBackend",
    "rediss": "lockkit_core.backends.redis:RedisBackend",
    "unix": "lockkit_core.backends.redis:RedisBackend",
    "redlock": "lockkit_core.backends.redlock:RedlockBackend",
    "redis+cluster": "lockkit_core.backends.redis.cluster:RedisClusterBackend",
    "redis+sentinel": "lockkit_core.backends.redis.sentinel:RedisSentinelBackend",
    "zookeeper": "lockkit_core.backends.zookeeper:ZooKeeperBackend",
    "etcd": "lockkit_core.backends.etcd:EtcdBackend",
    "postgresql": "lockkit_core.backends.sql.postgres:PostgresBackend",
    "postgres": "lockkit_core.backends.sql.postgres:PostgresBackend",
    "sqlite": "lockkit_core.backends.sql.sqlite:SqliteBackend",
    "mysql": "lockkit_core.backends.sql.mysql:MySQLBackend",
    "mariadb": "lockkit_core.backends.sql.mysql:MySQLBackend",
    "django": "lockkit_core.backends.sql.django:DjangoBackend",
}


@functools.cache
def _plugin_schemes() -> dict[str, str]:
    """Schemes that installed packages declare in the ``lockkit.backends`` group."""
    return {
        ep.name: ep.value
        for ep in entry_points(group="lockkit.backends")
        if ep.name not in _BUILTIN
    }


def known_schemes() -> list[str]:
    """Every scheme a URL may use here: built-ins and installed plug-ins."""
    return sorted({*_BUILTIN, *_plugin_schemes()})


def backend_class(scheme: str) -> type[Backend]:
    """The backend class for ``scheme``; an unknown scheme lists the known ones."""
    target = _BUILTIN.get(scheme) or _plugin_schemes().get(scheme)
    if target is None:
        raise ConfigError(
            f"unknown lock backend scheme {scheme + '://'!r}; known schemes: "
            + ", ".join(s + "://" for s in known_schemes())
        )
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    cls = getattr(module, attr)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise ConfigError(f"{target} registered for {scheme}:// is not a lockkit Backend")
    return cls


def check_installed(cls: type[Backend], scheme: str) -> None:
    if cls.requires is None:
        return
    try:
        importlib.import_module(cls.requires)
    except ImportError as exc:
        raise BackendNotInstalled(scheme, cls.extra or scheme, cls.requires) from exc


def create_backend(url: str | LockURL, options: Mapping[str, Any] | None = None) -> Backend:
    """Construct the backend that ``url`` names."""
    parsed = url if isinstance(url, LockURL) else parse_url(url)
    cls = backend_class(parsed.scheme)
    check_installed(cls, parsed.scheme)
    options = dict(options or {})
    return cls.variant(parsed, options)(parsed, options)
