"""The contract suite on ``sqlite://`` (a database file shared by the processes of one host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockkit_core.testing.contract import LockContract


class TestSqliteContract(LockContract):
    @pytest.fixture
    def backend_url(self, tmp_path: Path) -> str:
        return f"sqlite://{tmp_path / 'locks.db'}"
