"""A real PostgreSQL for the session, and the ``pg`` database alias of tests/djproject on it
(with the ``my`` alias on MariaDB and ``lite`` on a SQLite file, made the same way).

Registered in conftest.py. The server starts only when a collected test uses the ``pg``
alias (``@pytest.mark.django_db(databases=["pg"])``), just before pytest-django creates the
test databases, so SQLite-only runs never need PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections
from pytest_django.fixtures import _get_databases_for_setup

from lockkit_core.testing import PostgresServer
from lockkit_core.testing.mariadb import MariaDBServer
from lockkit_core.testing.pgbouncer import PgBouncerServer

PG_ALIAS = "pg"
MY_ALIAS = "my"
LITE_ALIAS = "lite"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server on a free loopback port for the whole session, stopped at the end."""
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    request: pytest.FixtureRequest,
    django_db_modify_db_settings_parallel_suffix: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Point the ``pg`` alias at :func:`postgres_server`, ``my`` at the MariaDB of
    tests/mariadb_fixtures.py and ``lite`` at a SQLite file of this session, before the test
    databases are made; only the aliases a collected test uses start a server."""
    aliases, _ = _get_databases_for_setup(request.session.items)
    # The connection's settings dict is the one in settings.DATABASES: update it in place.
    if PG_ALIAS in aliases:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        connections[PG_ALIAS].settings_dict.update(server.settings())
    if MY_ALIAS in aliases:
        mariadb: MariaDBServer = request.getfixturevalue("mariadb_server")
        connections[MY_ALIAS].settings_dict.update(mariadb.settings())
    if LITE_ALIAS in aliases:
        test = connections[LITE_ALIAS].settings_dict["TEST"]
        test["NAME"] = str(tmp_path_factory.mktemp("lite") / "test.sqlite3")


@pytest.fixture(scope="session")
def pg_env(postgres_server: PostgresServer, django_db_setup: None) -> dict[str, str]:
    """Environment variables that point a djproject process's ``pg`` alias at the test database
    (rows it should see must be committed: ``django_db(databases=["pg"], transaction=True)``)."""
    settings = connections[PG_ALIAS].settings_dict
    names = ("HOST", "PORT", "USER", "NAME")
    return {f"DJPROJECT_PG_{name}": str(settings[name]) for name in names}


@pytest.fixture(scope="session")
def pgbouncer(postgres_server: PostgresServer) -> Iterator[PgBouncerServer]:
    """A real PgBouncer in transaction pooling mode in front of :func:`postgres_server`."""
    with PgBouncerServer(postgres_server, pool_mode="transaction") as bouncer:
        yield bouncer
