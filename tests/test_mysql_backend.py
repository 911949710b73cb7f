"""``mysql://`` beyond the contract: what the lease table holds, and the table made by
``lockkit migrate`` for a user that cannot run DDL."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from lease_tables import check_told_to_migrate_and_works_after_it

from lockkit_core import ConfigError, LockKit
from lockkit_core.backends.sql import MySQLBackend
from lockkit_core.registry import create_backend
from lockkit_core.testing.mariadb import MariaDBServer

pytestmark = pytest.mark.mysql


def _admin(server: MariaDBServer, database: str | None = None) -> pymysql.Connection:  # type: ignore[type-arg]
    return pymysql.connect(
        host=server.host, port=server.port, user=server.user, database=database, autocommit=True
    )


@pytest.fixture
def fresh_db(mariadb_server: MariaDBServer) -> Iterator[str]:
    name = f"db_{uuid.uuid4().hex[:12]}"
    admin = _admin(mariadb_server)
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    yield name
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE {name}")
    admin.close()


def _url(server: MariaDBServer, database: str, user: str | None = None) -> str:
    return f"mysql://{user or server.user}@{server.host}:{server.port}/{database}"


def test_the_table_is_made_on_first_use_and_keeps_a_digest_never_the_owner(
    mariadb_server: MariaDBServer, fresh_db: str
) -> None:
    key = "order:" + "é" * 2000 + ":42"  # whole: longer than InnoDB's 3072-byte index limit
    with LockKit(_url(mariadb_server, fresh_db), namespace="ns") as kit:
        with kit.lock(key) as held:
            admin = _admin(mariadb_server, fresh_db)
            with admin.cursor() as cursor:
                cursor.execute("SELECT `key`, owner, fence, holder FROM lockkit_lease")
                rows = cursor.fetchall()
            admin.close()
            assert len(rows) == 1
            stored, owner, fence, holder = rows[0]
            assert stored.decode() == "ns:" + key
            assert held.owner not in owner and len(owner) == 40
            assert fence == held.token and " pid " in holder
            info = kit.admin.info(key)
            assert info is not None and info.key == key
            assert [lease.key for lease in kit.admin.list("order:")] == [key]
        assert kit.admin.info(key) is None


def test_a_user_without_ddl_rights_is_told_to_migrate_and_works_after_it(
    mariadb_server: MariaDBServer, fresh_db: str
) -> None:
    role = f"app_{uuid.uuid4().hex[:8]}"
    admin = _admin(mariadb_server)
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE USER '{role}'@'%'")
        cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {fresh_db}.* TO '{role}'@'%'")

    def exists() -> bool:
        with admin.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM information_schema.tables "
                "WHERE table_schema = %s AND table_name = 'lockkit_lease'",
                (fresh_db,),
            )
            return bool(cursor.fetchone()[0])

    try:
        check_told_to_migrate_and_works_after_it(
            _url(mariadb_server, fresh_db, role),
            _url(mariadb_server, fresh_db),
            exists,
            lambda: None,  # granted on the whole database above
        )
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP USER '{role}'@'%'")
        admin.close()


def test_a_row_lock_held_by_a_stopped_transaction_reads_as_busy_within_a_second(
    mariadb_server: MariaDBServer, fresh_db: str
) -> None:
    """A locker stopped between the two round trips of its acquire holds the key's row lock:
    others are told the key is busy after InnoDB's lock wait (1 s), not after a socket
    timeout, and not with BackendUnavailable."""
    with LockKit(_url(mariadb_server, fresh_db)) as kit:
        with kit.lock("k", ttl=0.05, auto_renew=False):
            pass  # makes the row's table
        kit.lock("k", ttl=0.05, auto_renew=False).acquire()
        time.sleep(0.1)  # its lease is over: a taker would lock the row
        stopped = _admin(mariadb_server, fresh_db)
        try:
            with stopped.cursor() as cursor:
                cursor.execute("START TRANSACTION")
                cursor.execute("SELECT * FROM lockkit_lease FOR UPDATE")
            start = time.monotonic()
            assert kit.lock("k").acquire(blocking=False) is False
            assert time.monotonic() - start < 3.0
        finally:
            stopped.close()
        with kit.lock("k", timeout=2) as held:
            assert held.owned()


def test_uncontended_acquire_and_release_take_two_round_trips(
    mariadb_server: MariaDBServer, fresh_db: str
) -> None:
    """Each ``COM_QUERY`` the client sends is one round trip (a multi-statement's results come
    back in the same exchange)."""
    backend = create_backend(_url(mariadb_server, fresh_db))
    assert isinstance(backend, MySQLBackend)
    try:
        owner = secrets.token_hex(16)
        assert backend.try_acquire("warm", owner, 5.0).acquired  # makes the table
        assert backend.release("warm", owner)
        pool: Any = backend._pool
        conn, _ = pool.take("count")
        sent = [0]
        query = conn.query

        def counted(sql: Any, unbuffered: bool = False) -> Any:
            sent[0] += 1
            return query(sql, unbuffered)

        conn.query = counted
        pool.give(conn)
        assert backend.try_acquire("k", owner, 5.0).acquired
        assert backend.release("k", owner)
        assert sent[0] == 2
    finally:
        backend.close()


#: a process in which Django's MySQL backend runs on PyMySQL (``pymysql.install_as_MySQLdb()``,
#: as Django projects without mysqlclient do), then takes a lock on a database with no table
_AS_MYSQLDB = """
import sys
import pymysql
pymysql.install_as_MySQLdb()
import MySQLdb.converters  # what django.db.backends.mysql imports
from lockkit_core import LockKit
with LockKit(sys.argv[1]) as kit, kit.lock("k") as held:
    print(held.token)
"""


def test_errors_are_translated_when_pymysql_also_serves_as_mysqldb(
    mariadb_server: MariaDBServer, fresh_db: str
) -> None:
    """Importing ``MySQLdb.converters`` through the alias loads a second copy of PyMySQL's
    error module and rebinds ``pymysql.err`` to it; the driver still raises the first copy's
    classes, which must be the ones caught (here: "no table", which makes the table)."""
    done = subprocess.run(
        [sys.executable, "-c", _AS_MYSQLDB, _url(mariadb_server, fresh_db)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://u@127.0.0.1:3306/", "one database name"),
        ("mysql://u@127.0.0.1:3306/a/b", "one database name"),
        ("mysql://u@127.0.0.1:3306/db?table=x;drop", "not allowed"),
        ("mysql://u@127.0.0.1:3306/db?connect_timeout=0", "positive"),
        ("mysql://u@127.0.0.1:3306/db?colour=red", "unknown option"),
    ],
)
def test_bad_urls_are_config_errors(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        LockKit(url)
