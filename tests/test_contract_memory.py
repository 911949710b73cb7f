"""The contract suite on ``memory://`` (threads of one process)."""

from __future__ import annotations

import uuid

import pytest

from lockkit_core.testing.contract import LockContract


class TestMemoryContract(LockContract):
    @pytest.fixture
    def backend_url(self) -> str:
        return f"memory://contract-{uuid.uuid4().hex[:12]}"
