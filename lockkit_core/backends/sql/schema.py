"""The lease table's DDL for each database, and the check on a table name taken from a URL.

One row per held key: the whole key (never a hashed 64-bit key that could collide), the
SHA-1 of the owner token (``backends.base.owner_id``; the secret never reaches the database),
the expiry on the database's clock, the fencing token, who holds it and since when. Fences
come from a counter that outlives the rows (a sequence on PostgreSQL, a one-row table on
SQLite), so a key freed, deleted and taken again still gets a larger token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ...errors import ConfigError
from ..base import Capability, Lease

__all__ = [
    "DEFAULT_TABLE",
    "LEASE_TABLE",
    "SERVER_OPTIONS",
    "LeaseTable",
    "check_table",
    "lease_from_row",
    "mysql_ddl",
    "postgres_ddl",
    "sqlite_ddl",
]

#: what a lease table gives on every database (a server adds CROSS_HOST, PostgreSQL NOTIFY)
LEASE_TABLE = (
    Capability.TTL
    | Capability.FENCING
    | Capability.CROSS_PROCESS
    | Capability.LIST
    | Capability.HAND_OFF
)
#: the URL options of a database server's connection, beside each store's own
SERVER_OPTIONS: Mapping[str, type] = {
    "username": str,
    "password": str,
    "connect_timeout": float,
    "socket_timeout": float,
}


@runtime_checkable
class LeaseTable(Protocol):
    """A backend whose store needs its lease table made (what ``lockkit migrate`` drives)."""

    table: str

    def ddl(self) -> list[str]:
        """The statements that create the table, in order; each may run again harmlessly."""
        ...

    def create_schema(self) -> None:
        """Run :meth:`ddl` on the store."""
        ...


def lease_from_row(row: Sequence[Any]) -> Lease:
    """The :class:`Lease` of one row read as ``(key, owner digest, fence, seconds left,
    holder, start time in seconds since the epoch)``."""
    key, owner, fence, left, holder, started = row
    return Lease(
        key=key,
        owner_hint=str(owner)[:8],
        token=int(fence),
        ttl_remaining=max(0.0, float(left)),
        holder=holder,
        started=float(started),
    )


DEFAULT_TABLE = "lockkit_lease"
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


def check_table(name: str) -> str:
    """``name`` if it is a plain lower-case SQL identifier (it is spliced into statements,
    so nothing else is accepted); else a :class:`ConfigError` saying what is allowed."""
    if not _NAME.match(name):
        raise ConfigError(
            f"table name {name!r} is not allowed: use 1-41 characters a-z, 0-9 and _, "
            "not starting with a digit (for example 'lockkit_lease')"
        )
    return name


def postgres_ddl(table: str) -> list[str]:
    """Statements creating the lease table and its fence sequence (idempotent)."""
    check_table(table)
    return [
        f"CREATE SEQUENCE IF NOT EXISTS {table}_fence AS bigint",
        # COLLATE "C": byte order, so the admin's prefix scans (LIKE 'ns:%') use the index.
        f"""CREATE TABLE IF NOT EXISTS {table} (
    key text COLLATE "C" PRIMARY KEY,
    owner char(40) NOT NULL,
    expires_at timestamptz NOT NULL,
    ttl double precision NOT NULL,
    fence bigint NOT NULL,
    holder text NOT NULL,
    started_at timestamptz NOT NULL
)""",
    ]


def sqlite_ddl(table: str) -> list[str]:
    """Statements creating the lease table and its fence counter (idempotent). Times are
    seconds since the epoch as REAL, read from SQLite's own clock (``unixepoch('subsec')``
    needs 3.42; ``julianday`` works everywhere)."""
    check_table(table)
    return [
        f"""CREATE TABLE IF NOT EXISTS {table} (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires_at REAL NOT NULL,
    ttl REAL NOT NULL,
    fence INTEGER NOT NULL,
    holder TEXT NOT NULL,
    started_at REAL NOT NULL
)""",
        f"CREATE TABLE IF NOT EXISTS {table}_fence (id INTEGER PRIMARY KEY CHECK (id = 1), "
        "value INTEGER NOT NULL)",
        f"INSERT OR IGNORE INTO {table}_fence (id, value) VALUES (1, 0)",
    ]


def mysql_ddl(table: str) -> list[str]:
    """Statements creating the lease table and its fence counter on MariaDB / MySQL
    (idempotent). InnoDB indexes at most 3072 bytes, so the primary key is the SHA-256 of the
    whole key, which is kept beside it (as UTF-8 bytes: no collation folds two keys)."""
    check_table(table)
    return [
        f"""CREATE TABLE IF NOT EXISTS {table} (
    key_hash BINARY(32) NOT NULL PRIMARY KEY,
    `key` BLOB NOT NULL,
    owner CHAR(40) CHARACTER SET ascii NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    ttl DOUBLE NOT NULL,
    fence BIGINT UNSIGNED NOT NULL,
    holder VARCHAR(255) NOT NULL,
    started_at DATETIME(6) NOT NULL
) ENGINE=InnoDB""",
        f"CREATE TABLE IF NOT EXISTS {table}_fence (id TINYINT NOT NULL PRIMARY KEY, "
        "value BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
        f"INSERT IGNORE INTO {table}_fence (id, value) VALUES (1, 0)",
    ]
