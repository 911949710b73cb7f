"""The contract suite on Redis Sentinel (through the master the sentinels name) and on a
3-master Redis Cluster.

The two long exclusion runs (threads, processes: about a minute per deployment on a loaded
machine) are left to ``test_contract_redis.py``, which runs the same script on the same wire
path; exclusion across processes on the cluster is ``test_redis_cluster.py``'s 1,000-key
test, and on Sentinel it is the plain master's."""

from __future__ import annotations

import pytest

from lockkit_core.testing.contract import LockContract
from lockkit_core.testing.redis_cluster import RedisClusterDeployment
from lockkit_core.testing.redis_sentinel import SentinelDeployment

pytestmark = pytest.mark.redis


class TestRedisSentinelContract(LockContract):
    test_mutual_exclusion_across_processes = None  # type: ignore[assignment]
    test_mutual_exclusion_across_threads = None  # type: ignore[assignment]

    @pytest.fixture
    def backend_url(self, sentinel_deployment: SentinelDeployment) -> str:
        return sentinel_deployment.url + "?socket_timeout=2&socket_connect_timeout=2"


class TestRedisClusterContract(LockContract):
    test_mutual_exclusion_across_processes = None  # type: ignore[assignment]
    test_mutual_exclusion_across_threads = None  # type: ignore[assignment]

    @pytest.fixture
    def backend_url(self, redis_cluster: RedisClusterDeployment) -> str:
        return redis_cluster.url + "?socket_timeout=2&socket_connect_timeout=2"
