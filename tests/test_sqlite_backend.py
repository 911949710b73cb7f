"""``sqlite://`` beyond the contract: killed and stopped holders, fences that outlive the
rows, and the URLs it refuses."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from holders import (
    check_sigkilled_holder_frees_the_key_within_its_ttl,
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume,
)

from lockkit_core import ConfigError, LockKit


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'locks.db'}"


@pytest.fixture
def namespace() -> str:
    return f"sq{uuid.uuid4().hex[:10]}"


@pytest.fixture
def direct(db_url: str, namespace: str) -> Iterator[LockKit]:
    kit = LockKit(db_url, namespace=namespace, ttl=5)
    yield kit
    kit.close()


@pytest.mark.slow
def test_sigkilled_holder_frees_the_key_within_its_ttl(
    db_url: str, direct: LockKit, namespace: str
) -> None:
    check_sigkilled_holder_frees_the_key_within_its_ttl(db_url, direct, namespace)


@pytest.mark.slow
def test_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(
    db_url: str, direct: LockKit, namespace: str
) -> None:
    check_sigstopped_holder_loses_the_lock_and_finds_out_on_resume(db_url, direct, namespace)


def test_the_table_keeps_a_digest_of_the_owner_and_no_row_once_free(
    db_url: str, direct: LockKit, tmp_path: Path
) -> None:
    with direct.lock("k") as held:
        with sqlite3.connect(tmp_path / "locks.db") as conn:
            rows = conn.execute("SELECT key, owner, holder FROM lockkit_lease").fetchall()
        assert len(rows) == 1
        key, owner, holder = rows[0]
        assert key.endswith(":k") and held.owner not in owner and len(owner) == 40
        assert "pid" in holder
    with sqlite3.connect(tmp_path / "locks.db") as conn:
        assert conn.execute("SELECT count(*) FROM lockkit_lease").fetchone() == (0,)


def test_fences_outlive_the_rows(direct: LockKit) -> None:
    tokens = []
    for _ in range(3):
        with direct.lock("f") as held:
            tokens.append(held.token)
        assert direct.admin.info("f") is None
    assert tokens == sorted(tokens) and len(set(tokens)) == 3


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sqlite://relative.db", "absolute path"),
        ("sqlite:///", "absolute path"),
        ("sqlite:///no/such/dir/locks.db", "does not exist"),
        ("sqlite:///tmp/x.db?table=Bad-Name", "not allowed"),
        ("sqlite:///tmp/x.db?timeout=0", "positive"),
        ("sqlite:///tmp/x.db?colour=red", "unknown option"),
    ],
)
def test_bad_urls_are_config_errors(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        LockKit(url)
