"""A throwaway, pinned redis-server for one benchmark run.

Built on :class:`lockkit_core.testing.servers.RedisServer` (free loopback port, ``--save ''``,
``--appendonly no``); this module only adds the CPU pinning and a client for resetting the
dataset between contenders.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from lockkit_core.testing.servers import RedisServer

from .machine import pin_all_threads

__all__ = ["BenchRedis", "redis_server"]


@dataclass(frozen=True)
class BenchRedis:
    """The running server: its URL and version, and a client to flush it between runs."""

    url: str
    version: str
    client: redis.Redis
    pid: int | None = None

    def reset(self) -> None:
        """Drop every key (locks, fencing counters) so each contender starts from empty."""
        self.client.flushdb()


@contextmanager
def redis_server(cpu: int | None) -> Iterator[BenchRedis]:
    """Start redis-server on a free loopback port, pinned to ``cpu``; stop it on exit."""
    with RedisServer() as server:
        assert server.pid is not None
        pin_all_threads(server.pid, cpu)
        client = redis.Redis(host="127.0.0.1", port=server.port)
        try:
            version = str(client.info("server")["redis_version"])
            yield BenchRedis(url=server.url, version=version, client=client, pid=server.pid)
        finally:
            client.close()
