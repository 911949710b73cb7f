"""The contract suite on a real PostgreSQL server (the lease table)."""

from __future__ import annotations

import pytest

from lockkit_core.testing import PostgresServer
from lockkit_core.testing.contract import LockContract

pytestmark = pytest.mark.postgresql


class TestPostgresContract(LockContract):
    @pytest.fixture
    def backend_url(self, postgres_server: PostgresServer) -> str:
        return postgres_server.url + "?socket_timeout=5&connect_timeout=2"
