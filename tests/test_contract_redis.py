"""The contract suite on a real redis-server."""

from __future__ import annotations

import pytest

from lockkit_core.testing import RedisServer
from lockkit_core.testing.contract import LockContract

pytestmark = pytest.mark.redis


class TestRedisContract(LockContract):
    @pytest.fixture
    def backend_url(self, redis_server: RedisServer) -> str:
        return redis_server.url + "?socket_timeout=2&socket_connect_timeout=2"
