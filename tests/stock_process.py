"""The stock example for lockkit_core.sqlalchemy.fenced_update, in processes of its own.

``sell_orders`` is a spawned worker: it sells each order in turn (one item of stock per order,
once), each under the stock's lock, writing with ``fenced_update``. Run as a script it is a
holder steered through stdin (``python stock_process.py DB_URL LOCK_URL TTL``): ``acquire``
-> ``acquired <token>``; ``read`` -> ``quantity <n>``; ``write <n>`` -> ``written 1|0``
(fenced_update with the token it got, never checking the lock first: it stands for a holder
that does not know its lease ended); ``release`` -> ``released`` | ``lost``.
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import Any

import sqlalchemy as sa

from lockkit_core import LockKit, LockLost, LockNotOwned
from lockkit_core.sqlalchemy import fenced_update

SKU = "sku-1"
KEY = f"stock:{SKU}"


class StaleHolder(Exception):
    """A fenced write was refused: a newer lock holder has written the row."""


def tables(metadata: sa.MetaData, suffix: str) -> tuple[sa.Table, sa.Table]:
    """The stock table and the table of sold orders (no unique key: a double sale shows)."""
    stock = sa.Table(
        f"stock_{suffix}",
        metadata,
        sa.Column("sku", sa.String(40), primary_key=True),
        sa.Column("quantity", sa.Integer, nullable=False),
        sa.Column("fence", sa.BigInteger, nullable=False, server_default="0"),
    )
    sold = sa.Table(
        f"sold_{suffix}",
        metadata,
        sa.Column("order_id", sa.Integer, nullable=False),
    )
    return stock, sold


def sell(
    conn: sa.Connection, stock: sa.Table, sold: sa.Table, order: int, token: int | None
) -> bool:
    """Sell ``order`` if it is not sold yet: read, decrement, record. True if it wrote."""
    if conn.scalar(sa.select(sa.func.count()).where(sold.c.order_id == order)):
        return False
    quantity = conn.scalar(sa.select(stock.c.quantity).where(stock.c.sku == SKU))
    assert quantity is not None
    time.sleep(0.005)  # the app's own work between reading and writing the stock
    conn.execute(sa.insert(sold).values(order_id=order))
    where = stock.c.sku == SKU
    if token is None:  # no lock, so no token: a plain write
        conn.execute(sa.update(stock).where(where).values(quantity=quantity - 1))
        return True
    written = fenced_update(conn, stock, token, where, {"quantity": quantity - 1})
    if not written:
        # our lease ended while we worked (a stalled process) and a newer holder wrote:
        # the order's row goes with this transaction's rollback, and the order is retried
        raise StaleHolder(f"token {token} is older than the row's fence")
    return True


def sell_orders(
    db_url: str,
    lock_url: str,
    suffix: str,
    orders: list[int],
    locked: bool,
    start: Any,
    results: Any,
) -> None:
    """A worker process: once every worker is ready (``start``, a barrier), sell every order
    of ``orders`` that is not sold yet."""
    try:
        engine = sa.create_engine(db_url)
        stock, sold = tables(sa.MetaData(), suffix)
        kit = LockKit(lock_url, namespace=f"stock-{suffix}", ttl=10)
        with engine.connect() as conn:  # connected before the start
            conn.scalar(sa.select(stock.c.quantity))
        sales = 0
        start.wait(60)
        for order in orders:
            if locked:
                for _ in range(5):
                    try:
                        with kit.lock(KEY, timeout=60) as held, engine.begin() as conn:
                            assert held.token is not None
                            sales += sell(conn, stock, sold, order, held.token)
                        break
                    except (StaleHolder, LockLost):
                        continue
            else:  # the same work with no lock: the test's proof that the lock matters
                with engine.begin() as conn:
                    sales += sell(conn, stock, sold, order, None)
        kit.close()
        engine.dispose()
        results.put(("ok", sales))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    db_url, lock_url, suffix, ttl = sys.argv[1:5]
    engine = sa.create_engine(db_url)
    stock, _ = tables(sa.MetaData(), suffix)
    kit = LockKit(lock_url, namespace=f"stock-{suffix}")
    lock = kit.lock(KEY, ttl=float(ttl), auto_renew=True, reentrant=False)
    token = 0
    say("ready")
    for raw in sys.stdin:
        command, _, arg = raw.strip().partition(" ")
        if command == "acquire":
            assert lock.acquire(timeout=15)
            token = lock.token or 0
            say(f"acquired {token}")
        elif command == "read":
            with engine.connect() as conn:
                say(f"quantity {conn.scalar(sa.select(stock.c.quantity))}")
        elif command == "write":
            with engine.begin() as conn:
                written = fenced_update(conn, stock, token, stock.c.sku == SKU,
                                        {"quantity": int(arg)})  # fmt: skip
            say(f"written {int(written)}")
        elif command == "release":
            try:
                lock.release()
                say("released")
            except (LockLost, LockNotOwned):
                say("lost")
        elif command == "quit":
            break
    kit.close()
    engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
