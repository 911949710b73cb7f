"""Exclusion under a real multi-process server: the test project under gunicorn (2 workers x
4 gthread threads), its pay button double-clicked by concurrent HTTP clients.

Every order is paid by 4 duplicate POSTs sent at once. The pay view checks the order, works
20 ms and writes: unlocked, duplicates pay twice and push stock below zero; under
``@lock_view`` or ``LockMiddleware`` each order is paid once and no stock goes negative.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockkit_core.testing import RedisServer

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS.parent / "sample_projects" / "flask_tickets"))

from serve import Gunicorn, concurrently  # noqa: E402

ORDERS = 20
CLICKS = 4


@pytest.fixture(params=["file", pytest.param("redis", marks=pytest.mark.redis)])
def server(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer
) -> Iterator[Gunicorn]:
    url = f"file://{tmp_path}/locks" if request.param == "file" else redis_server.url
    env = {
        "PYTHONPATH": str(TESTS),
        "DJANGO_SETTINGS_MODULE": "djproject.settings",
        "DJPROJECT_DB": str(tmp_path / "shop.sqlite3"),
        "DJPROJECT_LOCKKIT_URL": url,
        "TICKETS_DATA_DIR": str(tmp_path),  # where the gunicorn helper writes its log
    }
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--run-syncdb", "-v", "0"],
        env={**os.environ, **env},
        check=True,
        timeout=60,
    )
    with Gunicorn(env, workers=2, threads=4, app="djproject.wsgi:application") as gunicorn:
        yield gunicorn


def pay_all(server: Gunicorn, prefix: str) -> tuple[list[dict[str, int]], list[int], set[int]]:
    """Reset the shop, double-click every order's pay button; the orders' state after."""
    reply = concurrently(server.port, [("POST", f"/shop/reset?n={ORDERS}", "")])[0]
    orders = json.loads(reply[1])["orders"]
    calls = [("POST", f"{prefix}/orders/{o}/pay/", "") for o in orders for _ in range(CLICKS)]
    replies = concurrently(server.port, calls, clients=16)
    statuses = [status for status, _ in replies]
    pids = {json.loads(body)["pid"] for status, body in replies if status == 200}
    state = json.loads(concurrently(server.port, [("GET", "/shop/state", "")])[0][1])
    return state["orders"], statuses, pids


@pytest.mark.parametrize("prefix", ["", "/mw"], ids=["lock_view", "middleware"])
def test_each_order_is_paid_once_and_stock_never_goes_negative(
    server: Gunicorn, prefix: str
) -> None:
    # The unlocked twin shows that this load does race: duplicates pay twice.
    unlocked, _, _ = pay_all(server, "/unlocked")
    assert any(o["payments"] > 1 or o["stock"] < 0 for o in unlocked), (
        "the duplicate clicks never raced: the test could not see a missing lock"
    )
    orders, statuses, pids = pay_all(server, prefix)
    assert set(statuses) <= {200, 409}
    assert len(pids) == 2, "both worker processes must have served requests"
    assert orders == [{"payments": 1, "stock": 0}] * ORDERS
