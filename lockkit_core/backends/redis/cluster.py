"""``redis+cluster://n1:7000,n2:7001/``: locks on a Redis Cluster (7.0 or later).

Every key of one lock lives in the hash slot of ``{<namespace>:<key>}`` (see the package
docstring), so each operation is one script on the master serving that slot, routed by
redis-py's ``RedisCluster`` (which follows MOVED/ASK redirections and learns the slots again
after a failover). Batches over several locks go one lock at a time (different slots).

**Hand-over notices over sharded pub/sub.** A waiting process subscribes (``SSUBSCRIBE``) to a
channel of its own *in the key's slot* (``lockkit:{<ns>:<key>}:w:<process>``) on the node that
serves it, and the script tells it with ``SPUBLISH``: the notice stays on that shard, where a
plain ``PUBLISH`` would be copied to every node over the cluster bus.

**Grade ``replicated-async``**, as Sentinel: a master that dies before its replica received a
grant loses it in the failover, and the promoted replica may grant the lock again while the
first holder runs on until its next renewal tells it (``on_lost``, ``LockLost``). Fence what
the lock protects. See docs/backends/redis-deployments.md.

Options as ``redis://`` except ``db`` (a cluster has only db 0); the URL's path must be empty.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import BackendUnavailable, ConfigError
from ...url import LockURL
from ..base import Grade
from .backend import RedisBackend
from .clients import ASYNC_MAX_CONNECTIONS, Clients, split_hosts
from .scripts import Script, script_source

if TYPE_CHECKING:
    import redis
    import redis.asyncio

__all__ = ["ClusterScript", "RedisClusterBackend"]

#: how often redis-py's cluster client tries a request again on a moved slot or a failed node,
#: so a failover is followed within one call; each try is bounded by the socket timeouts
CLUSTER_ATTEMPTS = 3


class ClusterScript(Script):
    """The lock script through ``RedisCluster``'s own routing: EVALSHA goes to the master of
    its first key's slot (loaded there again on NOSCRIPT)."""

    def __init__(self, client: Any, name: str, numkeys: int) -> None:
        from redis.exceptions import NoScriptError

        self._noscript = NoScriptError
        self._client = client
        self.source = script_source(name)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()  # noqa: S324 (Redis' id)
        self.numkeys = numkeys

    def __call__(self, *keys_and_args: Any) -> Any:
        try:
            return self._client.evalsha(self.sha, self.numkeys, *keys_and_args)
        except self._noscript:
            # SCRIPT LOAD goes to every master: a replica promoted since may lack it.
            self._client.script_load(self.source)
            return self._client.evalsha(self.sha, self.numkeys, *keys_and_args)


class RedisClusterBackend(RedisBackend):
    """Locks on a Redis Cluster (see the module docstring)."""

    schemes: ClassVar[tuple[str, ...]] = ("redis+cluster",)
    grade: ClassVar[Grade] = Grade.REPLICATED_ASYNC
    sharded: ClassVar[bool] = True
    option_types: ClassVar[Mapping[str, type]] = {
        k: v for k, v in RedisBackend.option_types.items() if not k.startswith("ssl_") and k != "db"
    }

    @classmethod
    def url_options(cls, url: LockURL) -> dict[str, Any]:
        if url.path.strip("/"):
            raise ConfigError(
                f"{url.redacted()}: a Redis Cluster has only db 0, so the URL has no /db path: "
                "redis+cluster://n1:7000,n2:7001/"
            )
        return super(RedisBackend, cls).url_options(url)

    def new_script(self, numkeys: int, name: str = "lock") -> Script:
        return ClusterScript(self.client, name, numkeys)

    def _clients_from_url(self, url: LockURL) -> Clients:
        import redis.asyncio.cluster
        import redis.exceptions
        from redis.backoff import ExponentialBackoff, NoBackoff
        from redis.cluster import ClusterNode, RedisCluster
        from redis.retry import Retry

        seeds = split_hosts(url, 6379, "redis+cluster://n1:7000,n2:7001/")
        options = dict(self.options)
        kwargs: dict[str, Any] = {
            "socket_timeout": 5.0,
            "socket_connect_timeout": 5.0,
            "protocol": 2,
            **options,
        }
        # A few quick tries, so a call that meets a moved slot or a dead master learns the
        # new layout and goes on, within a bounded time.
        backoff = ExponentialBackoff(cap=0.2, base=0.02)

        # A cluster client stands where a Redis client does: the same commands (EVALSHA,
        # SCRIPT LOAD, SCAN, pipelines, pub/sub) with the routing done for us.
        def make() -> Any:
            nodes = [ClusterNode(host, port) for host, port in seeds]  # type: ignore[no-untyped-call]
            return RedisCluster(
                startup_nodes=nodes, retry=Retry(backoff, CLUSTER_ATTEMPTS), **kwargs
            )

        try:
            # RedisCluster asks a seed for the slots here, at once
            client, listener = make(), make()
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"bad option for {url.redacted()}: {exc}") from exc
        except redis.exceptions.RedisError as exc:
            raise BackendUnavailable(
                f"cannot reach the redis cluster at {url.redacted()} to learn its slots: {exc}"
            ) from exc

        def make_async() -> redis.asyncio.Redis:
            from redis.asyncio.retry import Retry as AsyncRetry

            nodes = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in seeds]
            settings = {k: v for k, v in kwargs.items() if k != "max_connections"}
            made: Any = redis.asyncio.cluster.RedisCluster(
                startup_nodes=nodes,
                retry=AsyncRetry(NoBackoff(), CLUSTER_ATTEMPTS),
                max_connections=options.get("max_connections", ASYNC_MAX_CONNECTIONS),
                **settings,
            )
            return made  # type: ignore[no-any-return]

        timeout = float(kwargs["socket_timeout"])
        return Clients(client, listener, make_async, shared=False, socket_timeout=timeout)
