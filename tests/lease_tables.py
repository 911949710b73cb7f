"""A check the lease-table stores' tests share: an application user without DDL rights."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from click.testing import CliRunner

from lockkit_core import ConfigError, LockKit
from lockkit_core.cli import cli


def check_told_to_migrate_and_works_after_it(
    app_url: str, admin_url: str, exists: Callable[[], bool], grant: Callable[[], None]
) -> None:
    """On a database with no lease table, the user of ``app_url`` (no DDL rights) is told to
    run ``lockkit migrate``; ``--sql`` prints the DDL and makes nothing (``exists()`` says
    whether the table is there), the migration as the user of ``admin_url`` makes it, and once
    ``grant()`` gave the app user rights on it the lock works."""
    with LockKit(app_url) as kit, pytest.raises(ConfigError, match="lockkit migrate"):
        kit.lock("k").acquire(blocking=False)
    printed = CliRunner().invoke(cli, ["migrate", admin_url, "--sql"])
    assert printed.exit_code == 0, printed.output
    assert "CREATE TABLE IF NOT EXISTS lockkit_lease" in printed.output
    assert not exists()
    done = CliRunner().invoke(cli, ["migrate", admin_url])
    assert done.exit_code == 0, done.output
    assert "lockkit_lease is ready" in done.output
    assert exists()
    grant()
    with LockKit(app_url) as kit, kit.lock("k") as held:
        assert held.token is not None
