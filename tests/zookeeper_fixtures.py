"""Session fixtures for the zookeeper:// tests: one standalone server, one 3-member ensemble."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockkit_core.testing.zookeeper import ZooKeeperEnsemble, ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper (tickTime 100 ms: sessions from 0.2 s) for the whole session."""
    server = ZooKeeperServer(tick_ms=100)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def zookeeper_ensemble() -> Iterator[ZooKeeperEnsemble]:
    """Three ZooKeeper members on loopback for the whole session."""
    ensemble = ZooKeeperEnsemble(3, tick_ms=200)
    try:
        yield ensemble
    finally:
        ensemble.close()
