"""The redis-py clients one backend talks through, made from a URL or from the app's own client.

A backend needs three things: a client for the lock operations and admin reads, a separate
pool for the release listener (pub/sub holds its connection for as long as anyone waits), and
a way to make a ``redis.asyncio`` client on each event loop. :func:`from_url` makes all three
from ``redis://``/``rediss://``/``unix://``; :func:`from_client` takes an app's client
(``LockKit.from_redis``) and uses *its* pool for the lock operations, giving each connection
back after every call, so lock connections count once against the app's ``max_connections``;
the listener and the asyncio clients get pools of their own built from the same connection
settings (host, TLS files, credentials, timeouts).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ...errors import ConfigError
from ...url import LockURL

if TYPE_CHECKING:
    import redis
    import redis.asyncio

__all__ = [
    "ASYNC_MAX_CONNECTIONS",
    "Clients",
    "client_url",
    "from_client",
    "from_url",
    "no_retries",
    "split_hosts",
]

#: connections of one event loop's client unless the ``max_connections`` option says
ASYNC_MAX_CONNECTIONS = 8
#: connection settings that mean the same on every node of a cluster (no host, no pool state)
_PORTABLE = frozenset(
    (
        "username", "password", "credential_provider", "socket_timeout",
        "socket_connect_timeout", "socket_keepalive", "socket_keepalive_options", "client_name",
        "protocol", "encoding", "encoding_errors", "decode_responses", "health_check_interval",
        "ssl",
    )
)  # fmt: skip
#: connection settings that belong to the pool that made them, never copied to another
_POOL_OWNED = ("himport_registry", "maint_notifications_pool_handler", "connection_pool")


@dataclass
class Clients:
    """What a backend talks through (see the module docstring)."""

    client: redis.Redis
    listener: redis.Redis
    #: makes one ``redis.asyncio`` client, on the running event loop
    make_async: Callable[[], redis.asyncio.Redis]
    #: the client's pool is the app's: give each connection back after a call
    shared: bool
    socket_timeout: float


def no_retries() -> dict[str, Any]:
    # No driver retries: they would stretch the caller's timeout. The backend retries
    # idempotent calls once itself (RedisBackend._call).
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return {"retry": Retry(NoBackoff(), 0), "retry_on_error": []}


def from_url(url: LockURL, options: Mapping[str, Any]) -> Clients:
    """Clients for a ``redis://``, ``rediss://`` or ``unix://`` URL and its parsed options."""
    import redis

    kwargs: dict[str, Any] = {
        "socket_timeout": 5.0,
        "socket_connect_timeout": 5.0,
        # RESP2 and no CLIENT SETINFO: a new connection (after a restart, or for the
        # listener) costs one round trip less than four.
        "protocol": 2,
    }
    if "driver_info" in inspect.signature(redis.Redis.__init__).parameters:
        kwargs["driver_info"] = None
    else:  # redis-py before 7
        kwargs.update(lib_name=None, lib_version=None)
    kwargs.update(options)
    parts = urlsplit(url.raw)
    # Options were parsed from the query already. A unix:// URL keeps its "//": without a
    # host, urlunsplit would write "unix:/path", which redis-py refuses.
    bare = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    if parts.scheme == "unix" and not parts.netloc:
        bare = "unix://" + parts.path
    try:
        return _from_bare_url(bare, kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"bad redis URL or option for {url.redacted()}: {exc}") from exc


def _from_bare_url(url: str, kwargs: dict[str, Any]) -> Clients:
    import redis
    import redis.asyncio
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff

    kwargs = {**kwargs, **no_retries()}
    client = redis.Redis.from_url(url, **kwargs)
    # The release listener has a pool of its own: taking a warm connection from the
    # command pool would make the next attempt open (and handshake) a new one.
    listener = redis.Redis.from_url(url, **kwargs)
    options = {k: v for k, v in kwargs.items() if k not in ("retry", "retry_on_error")}

    def make_async() -> redis.asyncio.Redis:
        settings = dict(options)
        # Many tasks share the loop's connections: one waits (on the loop) for a free one,
        # within the socket timeout, rather than failing with "too many connections".
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url,
            max_connections=settings.pop("max_connections", ASYNC_MAX_CONNECTIONS),
            timeout=settings.get("socket_timeout", 5.0),
            retry=AsyncRetry(NoBackoff(), 0),
            **settings,
        )
        return redis.asyncio.Redis(connection_pool=pool)

    timeout = float(kwargs.get("socket_timeout") or 5.0)
    return Clients(client, listener, make_async, shared=False, socket_timeout=timeout)


def _accepted(cls: type, settings: dict[str, Any]) -> dict[str, Any]:
    """The ``settings`` that ``cls(...)`` takes (its own and its bases' ``__init__``)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names.update(inspect.signature(init).parameters)
    return {k: v for k, v in settings.items() if k in names and k not in _POOL_OWNED}


def _settings(client: Any) -> tuple[Any, dict[str, Any]]:
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if pool is None or not isinstance(kwargs, dict):
        raise ConfigError(
            f"LockKit.from_redis() needs a redis.Redis client (from redis-py), or a Sentinel "
            f"master client; got {type(client).__name__}"
        )
    return pool, dict(kwargs)


def from_client(client: Any) -> Clients:
    """Clients around an app's ``redis.Redis`` (or ``Sentinel.master_for(...)``): its pool
    for the lock operations, pools of the same settings for the listener and asyncio."""
    import redis
    import redis.asyncio
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff

    if isinstance(client, redis.RedisCluster):
        return _from_cluster_client(client)
    if not isinstance(client, redis.Redis):
        raise ConfigError(
            "LockKit.from_redis() needs a redis.Redis client (from redis-py), a Sentinel "
            f"master client or a RedisCluster; got {type(client).__name__}"
        )
    pool, settings = _settings(client)
    listener_pool = _copy_pool(pool, settings)
    listener = redis.Redis(connection_pool=listener_pool)
    timeout = float(settings.get("socket_timeout") or 5.0)
    sentinel_async = _sentinel_async(pool, settings)
    if sentinel_async is not None:
        return Clients(client, listener, sentinel_async, shared=True, socket_timeout=timeout)
    async_class = _async_connection_class(pool.connection_class)

    def make_async() -> redis.asyncio.Redis:
        apool = redis.asyncio.BlockingConnectionPool(
            connection_class=async_class,
            max_connections=ASYNC_MAX_CONNECTIONS,
            timeout=settings.get("socket_timeout") or 5.0,
            **{**_accepted(async_class, settings), "retry": AsyncRetry(NoBackoff(), 0)},
        )
        return redis.asyncio.Redis(connection_pool=apool)

    return Clients(client, listener, make_async, shared=True, socket_timeout=timeout)


def _sentinel_async(pool: Any, settings: dict[str, Any]) -> Callable[[], Any] | None:
    """For a ``Sentinel.master_for(...)`` client: how to make an asyncio client that asks the
    same sentinels for the same master; None for any other pool."""
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.asyncio.sentinel import Sentinel as AsyncSentinel
    from redis.asyncio.sentinel import SentinelManagedConnection
    from redis.backoff import NoBackoff
    from redis.sentinel import SentinelConnectionPool

    if not isinstance(pool, SentinelConnectionPool):
        return None
    hosts: list[tuple[str, int]] = []
    sentinel_kwargs: dict[str, Any] = {}
    for sentinel in pool.sentinel_manager.sentinels:
        known = sentinel.connection_pool.connection_kwargs
        hosts.append((known.get("host", "localhost"), known.get("port", 26379)))
        sentinel_kwargs = {
            k: known[k]
            for k in ("socket_timeout", "socket_connect_timeout", "username", "password")
            if known.get(k) is not None
        }
    kept = _accepted(SentinelManagedConnection, settings)
    service = pool.service_name

    def make_async() -> Any:
        manager = AsyncSentinel(hosts, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
        kept["retry"] = AsyncRetry(NoBackoff(), 0)
        return manager.master_for(service, max_connections=ASYNC_MAX_CONNECTIONS, **kept)

    return make_async


def cluster_seeds(client: Any) -> list[tuple[str, int]]:
    """The masters a ``RedisCluster`` knows, as ``(host, port)``."""
    return [(node.host, int(node.port)) for node in client.get_primaries()]


def _from_cluster_client(client: Any) -> Clients:
    """Around an app's ``RedisCluster``: its own routing (and pools) for the lock scripts; a
    cluster client of the same settings for the sharded listener; asyncio likewise."""
    import redis.asyncio.cluster
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff
    from redis.cluster import ClusterNode, RedisCluster

    settings = dict(client.nodes_manager.connection_kwargs)
    seeds = cluster_seeds(client)
    kept = {k: v for k, v in settings.items() if k in _PORTABLE or k.startswith("ssl")}
    listener: Any = RedisCluster(
        startup_nodes=[ClusterNode(h, p) for h, p in seeds],  # type: ignore[no-untyped-call]
        **kept,
    )
    async_kept = {k: v for k, v in kept.items() if k != "ssl_ca_data" or v is not None}

    def make_async() -> Any:
        return redis.asyncio.cluster.RedisCluster(
            startup_nodes=[redis.asyncio.cluster.ClusterNode(h, p) for h, p in seeds],
            retry=AsyncRetry(NoBackoff(), 3),
            **async_kept,
        )

    timeout = float(settings.get("socket_timeout") or 5.0)
    return Clients(client, listener, make_async, shared=True, socket_timeout=timeout)


def _copy_pool(pool: Any, settings: dict[str, Any]) -> Any:
    """A pool of two connections with ``pool``'s settings (its class: a Sentinel pool keeps
    following the master)."""
    import redis
    from redis.sentinel import SentinelConnectionPool

    kept = {**_accepted(pool.connection_class, settings), **no_retries()}
    if isinstance(pool, SentinelConnectionPool):
        return SentinelConnectionPool(  # type: ignore[no-untyped-call]
            pool.service_name, pool.sentinel_manager, max_connections=2, **kept
        )
    return redis.ConnectionPool(connection_class=pool.connection_class, max_connections=2, **kept)


def _async_connection_class(cls: type) -> type:
    """The ``redis.asyncio`` connection class that speaks as ``cls`` does."""
    import redis.asyncio.connection as aconn
    import redis.connection as sconn

    for name in ("SSLConnection", "UnixDomainSocketConnection", "Connection"):
        if issubclass(cls, getattr(sconn, name)):
            found: type = getattr(aconn, name)
            return found
    raise ConfigError(f"LockKit.from_redis(): unknown redis-py connection class {cls.__name__}")


def split_hosts(url: LockURL, default_port: int, example: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` pairs of a several-server URL (``h1:p1,h2:p2``); ``example`` shows
    the right form in the error for a bad one."""
    text = url.host if url.port is None else f"{url.host}:{url.port}"
    hosts: list[tuple[str, int]] = []
    for part in (text or "").split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep:
            host, port = port, str(default_port)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"bad server address {part!r} in {url.redacted()}: give host:port pairs, "
                f"comma-separated: {example}"
            )
        hosts.append((host.strip("[]"), int(port)))
    return hosts


def client_url(client: Any) -> str:
    """A URL that names where ``client`` connects (never its password), for messages and
    ``lockkit info``."""
    import redis.connection

    if isinstance(client, redis.RedisCluster):
        seeds = ",".join(f"{host}:{port}" for host, port in cluster_seeds(client))
        return f"redis+cluster://{seeds}/"
    pool, settings = _settings(client)
    tls = issubclass(pool.connection_class, redis.connection.SSLConnection)
    scheme = "rediss" if tls else "redis"
    if settings.get("path"):
        return f"unix://{settings['path']}?db={settings.get('db', 0)}"
    user = f"{settings['username']}@" if settings.get("username") else ""
    host = settings.get("host", "localhost")
    return f"{scheme}://{user}{host}:{settings.get('port', 6379)}/{settings.get('db', 0)}"
