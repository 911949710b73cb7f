"""The contract suite on redlock:// over three real redis-servers."""

from __future__ import annotations

import pytest

from lockkit_core.testing.contract import LockContract
from lockkit_core.testing.redlock import RedlockNodes

pytestmark = pytest.mark.redis


class TestRedlockContract(LockContract):
    @pytest.fixture
    def backend_url(self, redlock_nodes: RedlockNodes) -> str:
        redlock_nodes.heal()
        return redlock_nodes.url("node_timeout=0.5&socket_timeout=2")
