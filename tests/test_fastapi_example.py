"""The FastAPI example of the README (sample_projects/fastapi_orders) under a real uvicorn
with two worker processes on a ``file://`` store: a dependency yields the held lock of an
order, a second request for that order is answered 409 with Retry-After at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from polling import wait_until

from lockkit_core import LockKit
from lockkit_core.testing.webservers import Uvicorn, http_call

APP = "sample_projects.fastapi_orders.app:app"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Uvicorn]:
    server = Uvicorn(APP, {"LOCKKIT_URL": f"file://{tmp_path / 'locks'}"}, log_dir=str(tmp_path))
    try:
        yield server
    finally:
        server.close()


def pay(server: Uvicorn, order: int, delay: float = 0.0) -> tuple[int, dict[str, str], dict]:  # type: ignore[type-arg]
    status, headers, body = http_call(server.port, "POST", f"/orders/{order}/pay?delay={delay}")
    return status, dict(headers), json.loads(body)


def test_a_busy_order_answers_409_and_a_free_one_runs(server: Uvicorn, tmp_path: Path) -> None:
    first: list[tuple[int, dict[str, str], dict]] = []  # type: ignore[type-arg]
    paying = threading.Thread(target=lambda: first.append(pay(server, 1, delay=1.0)))
    paying.start()
    # the first payment holds the order (a loaded machine may take a while to get it there)
    with LockKit(f"file://{tmp_path / 'locks'}", namespace="orders") as watcher:
        wait_until(lambda: watcher.admin.info("order:1") is not None)
    started = time.monotonic()
    status, headers, body = pay(server, 1)
    assert status == 409, body
    assert headers["retry-after"] == "1"
    assert "being changed" in body["detail"]
    assert time.monotonic() - started < 0.3, "busy is answered at once (timeout=0)"
    assert pay(server, 2)[0] == 200  # another order is not held up
    paying.join()
    assert first[0][0] == 200
    status, _, again = pay(server, 1)
    assert status == 200
    assert again["fence"] > first[0][2]["fence"]


def test_concurrent_duplicates_across_workers_run_once(server: Uvicorn) -> None:
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: pay(server, 3, delay=0.5)[0], range(8)))
    assert sorted(answers) == [200] + [409] * 7
