"""``redis+sentinel://s1:26379,s2:26379/mymaster/0``: the master that Redis Sentinel names.

The same locks as ``redis://`` (one script per operation, the same stored layout and
hand-over notices), on whichever server the sentinels call the master of ``mymaster``. A
connection asks the sentinels for the master when it connects, and drops itself when the
server it reaches has been demoted (READONLY) or dies, so after a failover the next request
reaches the new master: within the sentinels' ``down-after-milliseconds`` plus their election
(a few seconds) and one socket timeout. Requests meanwhile raise ``BackendUnavailable``.

**Grade ``replicated-async``.** Replication is asynchronous: a lock granted on the old master
just before it died may not have reached the replica that is promoted, and the new master then
grants it again while its first holder still believes it holds it. That holder learns it at
its next renewal (the record is gone: ``on_lost`` runs, ``check()`` raises ``LockLost``), up
to a third of a ttl later; meanwhile both run. Fence what the lock protects
(``held.token``: the new grant's token is higher as long as the servers' clocks agree to
within the time between the grants). See docs/backends/redis-deployments.md.

Options as ``redis://`` (``password``/``username`` are the master's), plus
``sentinel_password`` and ``sentinel_username`` when the sentinels want their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import ConfigError
from ...url import LockURL
from ..base import Grade
from .backend import RedisBackend
from .clients import ASYNC_MAX_CONNECTIONS, Clients, no_retries, split_hosts

if TYPE_CHECKING:
    import redis.asyncio

__all__ = ["RedisSentinelBackend", "sentinel_hosts"]

DEFAULT_SENTINEL_PORT = 26379


def sentinel_hosts(url: LockURL) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each sentinel in ``url`` (port 26379 when left out)."""
    return split_hosts(url, DEFAULT_SENTINEL_PORT, "redis+sentinel://s1:26379,s2:26379/mymaster/0")


class RedisSentinelBackend(RedisBackend):
    """Locks on the master that Redis Sentinel names (see the module docstring)."""

    schemes: ClassVar[tuple[str, ...]] = ("redis+sentinel",)
    grade: ClassVar[Grade] = Grade.REPLICATED_ASYNC
    option_types: ClassVar[Mapping[str, type]] = {
        **{k: v for k, v in RedisBackend.option_types.items() if not k.startswith("ssl_")},
        "service_name": str,
        "sentinel_username": str,
        "sentinel_password": str,
    }

    @classmethod
    def url_options(cls, url: LockURL) -> dict[str, Any]:
        """``/<service name>/<db>`` from the path; the user and password are the master's."""
        found = super(RedisBackend, cls).url_options(url)
        parts = [part for part in url.path.split("/") if part]
        if not parts or len(parts) > 2:
            raise ConfigError(
                f"{url.redacted()} names no master: give the sentinels' service name and a db, "
                "redis+sentinel://s1:26379,s2:26379/mymaster/0"
            )
        found["service_name"] = parts[0]
        if len(parts) == 2:
            found["db"] = parts[1]
        return found

    def _clients_from_url(self, url: LockURL) -> Clients:
        from redis.asyncio.retry import Retry as AsyncRetry
        from redis.asyncio.sentinel import Sentinel as AsyncSentinel
        from redis.backoff import NoBackoff
        from redis.sentinel import Sentinel

        hosts = sentinel_hosts(url)
        options = dict(self.options)
        service = options.pop("service_name")
        sentinel_auth = {
            name: options.pop(f"sentinel_{name}")
            for name in ("username", "password")
            if f"sentinel_{name}" in options
        }
        timeouts = {
            "socket_timeout": options.get("socket_timeout", 5.0),
            "socket_connect_timeout": options.get("socket_connect_timeout", 5.0),
        }
        kwargs: dict[str, Any] = {**timeouts, "protocol": 2, **options}
        sentinel_kwargs = {**timeouts, **sentinel_auth}
        manager = Sentinel(hosts, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
        try:
            # Two pools, as for redis://: the listener's pub/sub holds a connection of its own.
            client = manager.master_for(service, **kwargs, **no_retries())  # type: ignore[no-untyped-call]
            listener = manager.master_for(service, **kwargs, **no_retries())  # type: ignore[no-untyped-call]
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"bad option for {url.redacted()}: {exc}") from exc

        def make_async() -> redis.asyncio.Redis:
            amanager = AsyncSentinel(hosts, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
            settings = {k: v for k, v in kwargs.items() if k != "max_connections"}
            made: redis.asyncio.Redis = amanager.master_for(
                service,
                retry=AsyncRetry(NoBackoff(), 0),
                max_connections=options.get("max_connections", ASYNC_MAX_CONNECTIONS),
                **settings,
            )
            return made

        timeout = float(timeouts["socket_timeout"])
        return Clients(client, listener, make_async, shared=False, socket_timeout=timeout)

    def describe(self) -> str:
        return f"{self.url.redacted()} (the master the sentinels name)"
