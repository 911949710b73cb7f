"""The checks of the SQL stores: isolation level, and a pooler or proxy between us and the
server, as far as a client can tell.

What can be detected, honestly: a pooler or proxy listening on another port than the server
it forwards to (PgBouncer's 6432, ProxySQL's 6033: the server reports its own port), and one
that moves us to another server connection between statements (the backend pid or
connection id changes). Not detected: a pooler on the server's own port that happened to keep
us on one server connection while we looked. Transaction pooling breaks what lives on a
session: LISTEN (PostgreSQL's wake-ups), advisory locks (``?mode=advisory``) and MySQL's
GET_LOCK waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import LockKitError
from .findings import Finding, Level, unreachable

if TYPE_CHECKING:
    from ..backends.sql.mysql import MySQLBackend
    from ..backends.sql.postgres import PostgresBackend

__all__ = ["check_mysql", "check_postgres"]

_POOLER_FIX = (
    "point the URL at the database server itself (or a session-pooled PgBouncer/ProxySQL "
    "port): LISTEN wake-ups, advisory locks and session waits need one server connection"
)


def _one(cursor: Any, sql: str) -> Any:
    cursor.execute(sql)
    row = cursor.fetchone()
    return row[0] if row else None


def _findings(
    isolation: str,
    ids: tuple[Any, Any],
    port: Any,
    url_port: int | None,
    id_name: str,
    good: tuple[str, ...],
) -> list[Finding]:
    found = []
    level = Level.OK if isolation.lower().replace("-", " ") in good else Level.WARN
    found.append(
        Finding(
            level,
            "isolation",
            f"default isolation level {isolation}",
            ""
            if level is Level.OK
            else "the lease table's single statements are written for "
            "READ COMMITTED / REPEATABLE READ; under SERIALIZABLE expect retries",
        )
    )
    if ids[0] != ids[1]:
        found.append(
            Finding(
                Level.UNSAFE,
                "pooler",
                f"the {id_name} changed between two "
                f"statements ({ids[0]} then {ids[1]}): a transaction pooler sits "
                "in between",
                _POOLER_FIX,
            )
        )
    elif url_port is not None and port is not None and int(port) != url_port:
        found.append(
            Finding(
                Level.WARN,
                "pooler",
                f"the server listens on port {port}, the URL "
                f"says {url_port}: a pooler or proxy sits in between",
                _POOLER_FIX + " (fine if it pools by session)",
            )
        )
    else:
        found.append(
            Finding(
                Level.OK,
                "pooler",
                "no pooler seen (one that keeps us on one "
                "server connection on the server's port cannot be told apart)",
            )
        )
    return found


def check_postgres(backend: PostgresBackend, ttl: float) -> list[Finding]:
    return _check(
        backend,
        lambda conn, cur: _one(cur, "SHOW default_transaction_isolation"),
        "SELECT pg_backend_pid()",
        "SELECT inet_server_port()",
        5432,
        "backend pid",
    )


def check_mysql(backend: MySQLBackend, ttl: float) -> list[Finding]:
    return _check(backend, _isolation, "SELECT CONNECTION_ID()", "SELECT @@port", 3306,
                  "connection id")  # fmt: skip


def _check(
    backend: PostgresBackend | MySQLBackend,
    isolation: Callable[[Any, Any], Any],
    id_sql: str,
    port_sql: str,
    default_port: int,
    id_name: str,
) -> list[Finding]:
    """Ask the server its isolation level, our connection's id twice (a pooler may move us
    between statements) and its own port, on a connection of the backend's."""
    try:
        conn = backend.connection("run the doctor's checks")
    except LockKitError as exc:
        return [unreachable(exc)]
    try:
        with conn.cursor() as cur:
            level = str(isolation(conn, cur))
            first = _one(cur, id_sql)
            second = _one(cur, id_sql)
            port = _one(cur, port_sql)
    finally:
        conn.close()
    return _findings(
        level,
        (first, second),
        port,
        backend.url.port or default_port,
        id_name,
        ("read committed", "repeatable read"),
    )


def _isolation(conn: Any, cur: Any) -> Any:
    """MySQL 8 and MariaDB 11.1+ name it ``transaction_isolation``; older ones
    ``tx_isolation``."""
    # not pymysql.err.MySQLError: see backends/sql/mypool.py on PyMySQL serving as MySQLdb
    from pymysql.err import MySQLError

    try:
        return _one(cur, "SELECT @@SESSION.transaction_isolation")
    except MySQLError:
        return _one(cur, "SELECT @@SESSION.tx_isolation")
