"""lockkit_core.sqlalchemy.fenced_update: the stock example on each database.

The stock row and the lock store are the same database: PostgreSQL (``postgresql://``),
MariaDB (``mysql://``) and SQLite (``sqlite://``), all real. Processes sell orders of one
item each under the stock's lock; a holder stopped (SIGSTOP) past its ttl wakes to find its
write refused, because a newer holder's token is on the row.
"""

from __future__ import annotations

import multiprocessing
import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sa = pytest.importorskip("sqlalchemy")

from lockkit_core import LockKit  # noqa: E402
from lockkit_core.errors import ConfigError  # noqa: E402
from lockkit_core.sqlalchemy import fenced_update  # noqa: E402
from lockkit_core.testing import PostgresServer  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import stock_process  # noqa: E402

pytestmark = [pytest.mark.postgresql, pytest.mark.mysql, pytest.mark.timeout(240)]
STOCK = 100
ORDERS = 12
PROCESSES = 4
TTL = 1.0


@pytest.fixture(params=["postgresql", "mysql", "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(SQLAlchemy URL, lockkit URL) of one database."""
    if request.param == "postgresql":
        pg: PostgresServer = request.getfixturevalue("postgres_server")
        return pg.url.replace("postgresql://", "postgresql+psycopg://"), pg.url
    if request.param == "mysql":
        my = request.getfixturevalue("mariadb_server")
        return my.url.replace("mysql://", "mysql+pymysql://"), my.url
    path = tmp_path / "shop.db"
    return f"sqlite:///{path}", f"sqlite://{path}"


@pytest.fixture
def shop(database: tuple[str, str]) -> Iterator[tuple[str, str, str, Any, Any, Any]]:
    db_url, lock_url = database
    suffix = uuid.uuid4().hex[:10]
    engine = sa.create_engine(db_url)
    metadata = sa.MetaData()
    stock, sold = stock_process.tables(metadata, suffix)
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(sa.insert(stock).values(sku=stock_process.SKU, quantity=STOCK))
    yield db_url, lock_url, suffix, engine, stock, sold
    metadata.drop_all(engine)
    engine.dispose()


def _sell_everywhere(shop: tuple[Any, ...], locked: bool) -> list[tuple[str, Any]]:
    db_url, lock_url, suffix, *_ = shop
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    start = ctx.Barrier(PROCESSES)
    procs = []
    for _ in range(PROCESSES):
        orders = list(range(ORDERS))
        random.shuffle(orders)
        args = (db_url, lock_url, suffix, orders, locked, start, results)
        procs.append(ctx.Process(target=stock_process.sell_orders, args=args))
    for p in procs:
        p.start()
    got = [results.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(30)
    return got


def _counts(shop: tuple[Any, ...]) -> tuple[int, int, int]:
    *_, engine, stock, sold = shop
    with engine.connect() as conn:
        quantity = conn.scalar(sa.select(stock.c.quantity))
        sales = conn.scalar(sa.select(sa.func.count()).select_from(sold))
        distinct = conn.scalar(sa.select(sa.func.count(sa.distinct(sold.c.order_id))))
    return quantity, sales, distinct


def test_each_order_takes_one_item_once_across_processes(shop: tuple[Any, ...]) -> None:
    got = _sell_everywhere(shop, locked=True)
    errors = [detail for status, detail in got if status == "error"]
    assert not errors, errors[0]
    assert sum(detail for _, detail in got) == ORDERS
    assert _counts(shop) == (STOCK - ORDERS, ORDERS, ORDERS)


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
def test_without_the_lock_orders_are_sold_twice(shop: tuple[Any, ...]) -> None:
    """The same workers with the lock left out: the race the lock prevents does happen."""
    for _ in range(3):  # a race: give it a few chances on a quiet machine
        got = _sell_everywhere(shop, locked=False)
        quantity, sales, _ = _counts(shop)
        if sales > ORDERS or quantity != STOCK - sales:
            return
        del got
    pytest.fail("no double sale or lost update without the lock; the test cannot tell")


class Holder:
    """``stock_process.py`` steered through stdin."""

    def __init__(self, db_url: str, lock_url: str, suffix: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "stock_process.py"), db_url, lock_url, suffix, str(TTL)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert self.read() == "ready"

    def read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)


def test_a_holder_stopped_past_its_ttl_has_its_write_refused(shop: tuple[Any, ...]) -> None:
    db_url, lock_url, suffix, engine, stock, _ = shop
    stale = Holder(db_url, lock_url, suffix)
    try:
        old = int(stale.ask("acquire").split()[1])
        assert stale.ask("read") == f"quantity {STOCK}"
        stale.proc.send_signal(signal.SIGSTOP)  # a long pause, past its ttl
        with LockKit(lock_url, namespace=f"stock-{suffix}") as kit:
            with kit.lock(stock_process.KEY, timeout=10 * TTL) as held:
                token = held.token
                assert token is not None and token > old
                with engine.begin() as conn:
                    values = {"quantity": STOCK - 1}
                    where = stock.c.sku == stock_process.SKU
                    assert fenced_update(conn, stock, token, where, values)
            stale.proc.send_signal(signal.SIGCONT)
            assert stale.ask(f"write {STOCK - 1}") == "written 0"
            assert stale.ask("release") == "lost"
        with engine.connect() as conn:
            row = conn.execute(sa.select(stock.c.quantity, stock.c.fence)).one()
        assert tuple(row) == (STOCK - 1, token)
    finally:
        stale.close()


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_bad_input_is_a_config_error_naming_the_fix(shop: tuple[Any, ...]) -> None:
    *_, engine, stock, sold = shop
    where = stock.c.sku == stock_process.SKU
    with engine.begin() as conn:
        with pytest.raises(ConfigError, match="no fencing token"):
            fenced_update(conn, stock, None, where, {"quantity": 1})  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="leave it out"):
            fenced_update(conn, stock, 5, where, {"fence": 1})
        with pytest.raises(ConfigError, match="BigInteger"):
            fenced_update(conn, stock, 5, where, {"sku": "x"}, fence_column="quantity")
        with pytest.raises(ConfigError, match="has no column 'fence'"):
            fenced_update(conn, sold, 5, sold.c.order_id == 1, {"order_id": 2})
    assert _counts(shop)[0] == STOCK
