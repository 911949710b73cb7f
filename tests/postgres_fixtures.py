"""A real PostgreSQL for the session, and the ``pg`` database alias of tests/djproject on it.

Registered in conftest.py. The server starts only when a collected test uses the ``pg``
alias (``@pytest.mark.django_db(databases=["pg"])``), just before pytest-django creates the
test databases, so SQLite-only runs never need PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections
from pytest_django.fixtures import _get_databases_for_setup

from lockkit_core.testing import PostgresServer
from lockkit_core.testing.pgbouncer import PgBouncerServer

PG_ALIAS = "pg"


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
    request: pytest.FixtureRequest, django_db_modify_db_settings_parallel_suffix: None
) -> None:
    """Point the ``pg`` alias at :func:`postgres_server` before the test databases are made."""
    aliases, _ = _get_databases_for_setup(request.session.items)
    if PG_ALIAS not in aliases:
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    # The connection's settings dict is the one in settings.DATABASES: update it in place.
    connections[PG_ALIAS].settings_dict.update(server.settings())


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
