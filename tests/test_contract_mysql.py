"""The contract suite on a real MariaDB server (the lease table, through PyMySQL)."""

from __future__ import annotations

import pytest

from lockkit_core.testing.contract import LockContract
from lockkit_core.testing.mariadb import MariaDBServer

pytestmark = pytest.mark.mysql


class TestMySQLContract(LockContract):
    @pytest.fixture
    def backend_url(self, mariadb_server: MariaDBServer) -> str:
        return mariadb_server.url + "?socket_timeout=5&connect_timeout=2"
