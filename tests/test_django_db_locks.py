"""``django://ALIAS``: the lease table in a database Django knows, on connections of its own.

The ``pg`` alias of tests/djproject points at the session's real PostgreSQL (its test
database); processes the tests start find it through the ``DJPROJECT_PG_*`` variables."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from django.db import transaction

from lockkit_core import ConfigError, LockKit
from lockkit_core.backends.sql import PostgresBackend
from lockkit_core.cli import cli
from lockkit_core.testing.contract import LockContract

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(databases=["pg"], transaction=True)]


@pytest.fixture
def pg_url(pg_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in pg_env.items():
        monkeypatch.setenv(name, value)  # for the processes the tests start
    return "django://pg"


class TestDjangoAliasContract(LockContract):
    @pytest.fixture
    def backend_url(self, pg_url: str) -> str:
        return pg_url


@pytest.fixture
def kits(pg_url: str) -> Iterator[tuple[LockKit, LockKit]]:
    a, b = LockKit(pg_url, namespace="dj"), LockKit(pg_url, namespace="dj")
    yield a, b
    a.close()
    b.close()


class _Rollback(Exception):
    pass


def test_the_alias_chooses_the_postgresql_store_of_its_settings(
    kits: tuple[LockKit, LockKit],
) -> None:
    a, _ = kits
    backend = a.backend
    inner = backend.inner  # type: ignore[attr-defined]
    assert isinstance(inner, PostgresBackend)
    assert "test_lockkit" in inner.describe()  # the test database, as Django's connection


def test_a_rollback_of_the_request_transaction_neither_releases_nor_keeps_a_lock(
    kits: tuple[LockKit, LockKit],
) -> None:
    a, b = kits
    lock = a.lock("order:1")
    with pytest.raises(_Rollback), transaction.atomic(using="pg"):
        assert lock.acquire()
        raise _Rollback
    assert b.lock("order:1").acquire(blocking=False) is False  # still held
    with pytest.raises(_Rollback), transaction.atomic(using="pg"):
        lock.release()
        raise _Rollback
    assert b.lock("order:1").acquire(blocking=False) is True  # released for good


def test_migrate_prints_the_ddl_of_the_alias(pg_url: str) -> None:
    done = CliRunner().invoke(cli, ["migrate", pg_url, "--sql"])
    assert done.exit_code == 0, done.output
    assert "CREATE SEQUENCE IF NOT EXISTS lockkit_lease_fence" in done.output


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("django://nosuch", "DATABASES has: default, lite, my, pg"),
        ("django://default", "in-memory SQLite"),
        ("django://pg?colour=red", "unknown option"),
    ],
)
def test_bad_aliases_are_config_errors(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        LockKit(url)


def test_outside_django_the_settings_module_is_asked_for(tmp_path: object) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "lockkit_core.cli", "migrate", "django://default", "--sql"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "DJANGO_SETTINGS_MODULE" in done.stderr and "Traceback" not in done.stderr


def test_manage_py_migrate_creates_the_lease_table_of_the_alias(pg_url: str) -> None:
    """With ``LOCKKIT = {"URL": "django://pg"}``, migrating the lockkit app on ``pg`` creates
    the lease table there, through Django's own migration (a user that runs migrations may
    run DDL; the application's user then needs none)."""
    from django.core.management import call_command
    from django.db import connections
    from django.test import override_settings

    with connections["pg"].cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS lockkit_lease")
        cursor.execute("DROP SEQUENCE IF EXISTS lockkit_lease_fence")
    call_command("migrate", "lockkit", "zero", database="pg", verbosity=0)
    with override_settings(LOCKKIT={"URL": pg_url}):
        call_command("migrate", "lockkit", database="pg", verbosity=0)
    with connections["pg"].cursor() as cursor:
        cursor.execute("SELECT to_regclass('lockkit_lease'), to_regclass('lockkit_lease_fence')")
        assert cursor.fetchone() == ("lockkit_lease", "lockkit_lease_fence")


def test_a_sqlite_alias_waits_for_the_write_lock_as_django_does() -> None:
    from lockkit_core.backends.sql.django import store_url

    settings = {"ENGINE": "django.db.backends.sqlite3", "NAME": "/tmp/x.db"}
    assert store_url("a", {**settings, "OPTIONS": {"timeout": 30}}, {}) == (
        "sqlite:///tmp/x.db?timeout=30"
    )
    assert store_url("a", settings, {"timeout": "2"}) == "sqlite:///tmp/x.db?timeout=2"
