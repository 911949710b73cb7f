"""Fenced writes for SQLAlchemy Core: a write the database refuses when it comes from a lock
holder that is out of date (its lease ended, a newer holder has written since).

Give the table a 64-bit fence column and pass the lock's token::

    stock = Table("stock", metadata, Column("sku", String, primary_key=True),
                  Column("quantity", Integer), Column("fence", BigInteger, default=0))

    with kit.lock(f"stock:{sku}") as held, engine.begin() as conn:
        quantity = conn.scalar(select(stock.c.quantity).where(stock.c.sku == sku))
        if not fenced_update(conn, stock, held.token, stock.c.sku == sku,
                             {"quantity": quantity - 1}):
            raise RuntimeError("a newer lock holder has written this row")

It is one ``UPDATE ... WHERE fence < :token`` statement, so the check and the write are
atomic in the database whatever the isolation level. The same rules as
``lockkit_django.fenced_update``. Needs the ``sqlalchemy`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from .errors import ConfigError

__all__ = ["fenced_update"]


def fenced_update(
    conn: sa.Connection,
    table: sa.Table,
    token: int,
    where: sa.ColumnElement[bool] | Sequence[sa.ColumnElement[bool]],
    values: Mapping[str, Any],
    *,
    fence_column: str = "fence",
) -> bool:
    """Set ``values`` (and the fence to ``token``) on the rows of ``table`` that ``where``
    picks and whose fence is lower than ``token``; True if a row was written, False if a
    holder with a newer token had written it already. Runs in ``conn``'s transaction."""
    if isinstance(token, bool) or not isinstance(token, int):
        hint = (
            " (this backend gives no fencing token, e.g. redlock or advisory locks: fence "
            "with another store)"
            if token is None
            else ""
        )
        raise ConfigError(f"token must be an int, got {token!r}{hint}")
    fence = table.c.get(fence_column)
    if fence is None:
        raise ConfigError(
            f"table {table.name!r} has no column {fence_column!r}; add "
            f"Column({fence_column!r}, BigInteger, nullable=False, server_default='0')"
        )
    if not isinstance(fence.type, sa.BigInteger):
        raise ConfigError(
            f"{table.name}.{fence_column} is {fence.type!r}; it must be a BigInteger "
            "(fencing tokens are 64-bit)"
        )
    if fence_column in values:
        raise ConfigError(f"{fence_column!r} is set by fenced_update itself; leave it out")
    conditions = [where] if isinstance(where, sa.ColumnElement) else list(where)
    statement = (
        sa.update(table).where(*conditions, fence < token).values({**values, fence_column: token})
    )
    return conn.execute(statement).rowcount > 0
