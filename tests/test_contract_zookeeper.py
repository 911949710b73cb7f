"""The contract suite on a real ZooKeeper server."""

from __future__ import annotations

import pytest

from lockkit_core.testing.contract import LockContract
from lockkit_core.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.zookeeper


class TestZooKeeperContract(LockContract):
    @pytest.fixture
    def backend_url(self, zookeeper_server: ZooKeeperServer) -> str:
        return zookeeper_server.url + "?session_timeout=4&socket_timeout=2"
