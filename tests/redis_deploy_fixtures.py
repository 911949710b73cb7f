"""Session fixtures for the Redis deployments beyond one plain server: TLS (and, in their own
modules' turn, Sentinel and Cluster), each started once per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockkit_core.testing.redis_cluster import RedisClusterDeployment
from lockkit_core.testing.redis_sentinel import SentinelDeployment
from lockkit_core.testing.redis_tls import TlsRedisServer


@pytest.fixture(scope="session")
def tls_server() -> Iterator[TlsRedisServer]:
    """A TLS redis-server that wants a client certificate and an ACL user's password."""
    server = TlsRedisServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def sentinel_deployment() -> Iterator[SentinelDeployment]:
    """A master, its replica and three sentinels; tests that fail it over heal it after."""
    deployment = SentinelDeployment()
    try:
        yield deployment
    finally:
        deployment.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterDeployment]:
    """Three masters and three replicas in one Redis Cluster; failover tests heal it after."""
    cluster = RedisClusterDeployment()
    try:
        yield cluster
    finally:
        cluster.close()
