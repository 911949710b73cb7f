"""Session fixtures for the etcd tests: one etcd member and one 3-member cluster on loopback,
started on first use and stopped at the end of the run (registered in conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockkit_core.testing.etcd import EtcdCluster, EtcdServer


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """One etcd member on free loopback ports for the whole session."""
    with EtcdServer() as server:
        yield server


@pytest.fixture(scope="session")
def etcd_cluster() -> Iterator[EtcdCluster]:
    """Three etcd members on loopback forming one cluster, for the whole session."""
    with EtcdCluster(3) as cluster:
        yield cluster
