"""``django://ALIAS``: the lease table in the database Django knows as ``DATABASES[ALIAS]``.

The alias's settings (engine, host, port, user, password, name) choose and configure the
``postgresql://``, ``mysql://`` or ``sqlite://`` backend, which then runs on connections of
its own, never on Django's: a lock taken inside a request's transaction is neither released
nor kept by that transaction's rollback or commit. In tests, the alias's settings name the
test database, as Django's own connections do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

from ...errors import ConfigError
from ...registry import create_backend
from ...url import LockURL
from ..aio import AsyncOps
from ..base import Backend, Capability, Grade, Grant, Lease, Waiter
from .schema import LeaseTable

__all__ = ["DjangoBackend"]

_ENGINES = {
    "postgresql": "postgresql",
    "postgis": "postgresql",
    "mysql": "mysql",
    "sqlite3": "sqlite",
    "spatialite": "sqlite",
}


def _scheme(engine: str) -> str | None:
    """``postgresql``, ``mysql`` or ``sqlite`` for a Django ENGINE path, else None."""
    return _ENGINES.get(engine.rsplit(".", 1)[-1])


def store_url(alias: str, settings: Mapping[str, Any], query: Mapping[str, str]) -> str:
    """The ``postgresql://`` / ``mysql://`` / ``sqlite://`` URL of one ``DATABASES`` entry."""
    engine = str(settings.get("ENGINE", ""))
    scheme = _scheme(engine)
    if scheme is None:
        raise ConfigError(
            f"DATABASES[{alias!r}] uses {engine!r}; django:// works with PostgreSQL, "
            "MySQL/MariaDB and SQLite databases"
        )
    name = str(settings.get("NAME") or "")
    query = dict(query)
    busy = (settings.get("OPTIONS") or {}).get("timeout")
    if scheme == "sqlite" and "timeout" not in query and isinstance(busy, int | float):
        query["timeout"] = str(busy)  # wait for SQLite's write lock as the alias does
    options = "&".join(f"{k}={quote(str(v))}" for k, v in query.items())
    suffix = f"?{options}" if options else ""
    if scheme == "sqlite":
        if not name or name == ":memory:" or name.startswith("file:"):
            raise ConfigError(
                f"DATABASES[{alias!r}] is an in-memory SQLite database, private to one "
                "connection: locks need a database file (NAME = '/path/to/db.sqlite3')"
            )
        return f"sqlite://{quote(name)}{suffix}"
    user = quote(str(settings.get("USER") or ""), safe="")
    password = quote(str(settings.get("PASSWORD") or ""), safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = str(settings.get("HOST") or "127.0.0.1")
    port = str(settings.get("PORT") or "")
    netloc = f"{auth}{host}" + (f":{port}" if port else "")
    return f"{scheme}://{netloc}/{quote(name)}{suffix}"


class DjangoBackend(Backend):
    """Delegates every call to the backend the alias's settings make."""

    schemes: ClassVar[tuple[str, ...]] = ("django",)
    extra: ClassVar[str | None] = "django"
    requires: ClassVar[str | None] = "django"
    #: what every database store gives (PostgreSQL adds notify, the networked ones cross_host)
    capabilities: ClassVar[Capability] = (
        Capability.TTL
        | Capability.FENCING
        | Capability.CROSS_PROCESS
        | Capability.LIST
        | Capability.HAND_OFF
    )
    grade: ClassVar[Grade] = Grade.SINGLE_NODE
    option_types: ClassVar[Mapping[str, type]] = {
        "table": str,
        "socket_timeout": float,
        "connect_timeout": float,
        "timeout": float,
    }

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured
        from django.db import connections

        self.alias = urlsplit(url.raw).netloc or url.path.strip("/")
        try:
            databases = settings.DATABASES
        except ImproperlyConfigured as exc:
            raise ConfigError(
                f"{url.redacted()} needs Django's settings: {exc} (outside a Django process, "
                "set DJANGO_SETTINGS_MODULE, e.g. DJANGO_SETTINGS_MODULE=mysite.settings)"
            ) from exc
        if not self.alias or self.alias not in databases:
            known = ", ".join(sorted(databases)) or "(none)"
            raise ConfigError(
                f"{url.redacted()} names no database alias Django knows; DATABASES has: {known}"
            )
        query = {k: str(v) for k, v in self.options.items()}
        self.inner = create_backend(
            store_url(self.alias, connections[self.alias].settings_dict, query)
        )
        self.table = str(getattr(self.inner, "table", ""))

    def _table(self) -> LeaseTable:
        assert isinstance(self.inner, LeaseTable)  # every store store_url() names has one
        return self.inner

    def ddl(self) -> list[str]:
        return self._table().ddl()

    def create_schema(self) -> None:
        self._table().create_schema()

    # -- delegation ------------------------------------------------------------------------------

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        return self.inner.try_acquire(key, owner, ttl)

    def release(self, key: str, owner: str) -> bool:
        return self.inner.release(key, owner)

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        return self.inner.extend(key, owner, ttl)

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        return self.inner.adopt(key, owner, ttl)

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        return self.inner.waiter(key, owner, fair)

    def aio(self) -> AsyncOps:
        return self.inner.aio()

    def queue_first(self) -> bool:
        return self.inner.queue_first()

    def list(self, prefix: str) -> list[Lease]:
        return self.inner.list(prefix)

    def info(self, key: str) -> Lease | None:
        return self.inner.info(key)

    def force_release(self, key: str) -> bool:
        return self.inner.force_release(key)

    def after_fork_in_child(self) -> None:
        self.inner.after_fork_in_child()

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> str:
        return f"{self.url.redacted()} ({self.inner.describe()})"
