"""``postgresql://`` beyond the contract: what the lease table holds, round trips, the table
made by ``lockkit migrate`` for a user that cannot run DDL, and the URLs it refuses."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from lease_tables import check_told_to_migrate_and_works_after_it

from benchmarks.pg_trace import traced
from lockkit_core import ConfigError, LockKit
from lockkit_core.backends.sql import PostgresBackend
from lockkit_core.cli import cli
from lockkit_core.registry import create_backend
from lockkit_core.testing import PostgresServer

pytestmark = pytest.mark.postgresql


def _admin(
    server: PostgresServer, dbname: str | None = None
) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(
        host=server.host,
        port=server.port,
        user=server.user,
        dbname=dbname or server.database,
        autocommit=True,
    )


@pytest.fixture
def fresh_db(postgres_server: PostgresServer) -> Iterator[str]:
    """A new empty database on the session's server; its name."""
    name = f"db_{uuid.uuid4().hex[:12]}"
    with _admin(postgres_server) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield name
    with _admin(postgres_server) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _url(server: PostgresServer, dbname: str, user: str | None = None) -> str:
    return f"postgresql://{user or server.user}@{server.host}:{server.port}/{dbname}"


def test_the_table_is_made_on_first_use_and_keeps_a_digest_never_the_owner(
    postgres_server: PostgresServer, fresh_db: str
) -> None:
    key = "order:" + "é" * 300 + ":42"  # whole, unhashed: long and not ASCII
    with LockKit(_url(postgres_server, fresh_db), namespace="ns") as kit:
        with kit.lock(key) as held, _admin(postgres_server, fresh_db) as admin:
            rows = admin.execute(
                "SELECT key, owner, fence, holder, expires_at > now(), started_at <= now() "
                "FROM lockkit_lease"
            ).fetchall()
            assert len(rows) == 1
            stored, owner, fence, holder, live, started = rows[0]
            assert stored == "ns:" + key
            assert held.owner not in owner and len(owner) == 40
            assert fence == held.token
            assert holder.split()[-2:][0] == "pid" and live and started
        with _admin(postgres_server, fresh_db) as admin:
            assert admin.execute("SELECT count(*) FROM lockkit_lease").fetchone() == (0,)


def test_uncontended_acquire_and_release_take_two_round_trips(
    postgres_server: PostgresServer, fresh_db: str
) -> None:
    backend = create_backend(_url(postgres_server, fresh_db))
    assert isinstance(backend, PostgresBackend)
    try:
        owner = secrets.token_hex(16)
        backend.try_acquire("warm", owner, 5.0)  # makes the table
        backend.release("warm", owner)
        with traced(backend) as trips:
            for _ in range(10):  # past psycopg's prepare threshold: the steady state
                assert backend.try_acquire("k", owner, 5.0).acquired
                assert backend.release("k", owner)
            before = trips.count()
            assert backend.try_acquire("k", owner, 5.0).acquired
            assert backend.release("k", owner)
            assert trips.count() - before == 2
    finally:
        backend.close()


def test_a_user_without_ddl_rights_is_told_to_migrate_and_works_after_it(
    postgres_server: PostgresServer, fresh_db: str
) -> None:
    role = f"app_{uuid.uuid4().hex[:8]}"
    with _admin(postgres_server) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")

    def exists() -> bool:
        with _admin(postgres_server, fresh_db) as admin:
            row = admin.execute("SELECT to_regclass('lockkit_lease') IS NOT NULL").fetchone()
        return row == (True,)

    def grant() -> None:
        with _admin(postgres_server, fresh_db) as admin:
            admin.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON lockkit_lease TO {role}")
            admin.execute(f"GRANT USAGE ON SEQUENCE lockkit_lease_fence TO {role}")

    try:
        check_told_to_migrate_and_works_after_it(
            _url(postgres_server, fresh_db, role), _url(postgres_server, fresh_db), exists, grant
        )
    finally:
        with _admin(postgres_server, fresh_db) as admin:
            admin.execute(f"DROP OWNED BY {role}")
        with _admin(postgres_server) as admin:
            admin.execute(f"DROP ROLE {role}")


def test_the_printed_ddl_run_by_hand_makes_a_working_table(
    postgres_server: PostgresServer, fresh_db: str
) -> None:
    printed = CliRunner().invoke(
        cli, ["migrate", _url(postgres_server, fresh_db) + "?table=locks_here", "--sql"]
    )
    assert printed.exit_code == 0, printed.output
    with _admin(postgres_server, fresh_db) as admin:
        for statement in printed.output.split(";\n"):
            if statement.strip():
                admin.execute(statement)  # type: ignore[call-overload]
    url = _url(postgres_server, fresh_db) + "?table=locks_here"
    with LockKit(url) as kit, kit.lock("k") as held:
        assert kit.admin.info("k") is not None and held.token == 1


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql://u@127.0.0.1:5432/a/b", "one database name"),
        ("postgresql://u@127.0.0.1:5432/db?table=x;drop", "not allowed"),
        ("postgresql://u@127.0.0.1:5432/db?socket_timeout=-1", "positive"),
        ("postgresql://u@127.0.0.1:5432/db?colour=red", "unknown option"),
    ],
)
def test_bad_urls_are_config_errors(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        LockKit(url)


def test_migrate_refuses_a_store_without_a_table() -> None:
    done = CliRunner().invoke(cli, ["migrate", "memory://x"])
    assert done.exit_code == 1
    assert "nothing to migrate" in done.output
