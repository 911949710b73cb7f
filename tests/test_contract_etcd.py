"""The contract suite on a real etcd member."""

from __future__ import annotations

import pytest

from lockkit_core.testing.contract import LockContract
from lockkit_core.testing.etcd import EtcdServer

pytestmark = pytest.mark.etcd


class TestEtcdContract(LockContract):
    @pytest.fixture
    def backend_url(self, etcd_server: EtcdServer) -> str:
        return etcd_server.url + "?socket_timeout=2"
