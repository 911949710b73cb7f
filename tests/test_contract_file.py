"""The contract suite on ``file://`` (processes of one host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockkit_core.testing.contract import LockContract


class TestFileContract(LockContract):
    @pytest.fixture
    def backend_url(self, tmp_path: Path) -> str:
        return f"file://{tmp_path / 'locks'}"
