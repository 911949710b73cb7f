"""Session fixtures for the redlock:// tests: three independent redis-servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockkit_core.testing.redlock import RedlockNodes


@pytest.fixture(scope="session")
def redlock_nodes() -> Iterator[RedlockNodes]:
    """Three unrelated redis-servers on loopback for the whole session (the contract suite)."""
    with RedlockNodes(3) as nodes:
        yield nodes


@pytest.fixture
def fault_nodes() -> Iterator[RedlockNodes]:
    """Three redis-servers of the test's own, which it may stop, kill or pause."""
    with RedlockNodes(3) as nodes:
        yield nodes
