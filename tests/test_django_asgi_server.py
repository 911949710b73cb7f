"""Async views under a real ASGI server: tests/djproject under uvicorn with 2 worker processes,
hit by concurrent duplicate requests from real HTTP clients.

Each async view counts, in a file shared by the workers, how many of its runs overlap. Unlocked,
duplicates overlap; under ``@lock_view`` or ``LockMiddleware`` one runs per key at a time and
the others get 409. A request waiting for a lock (``wait=5``) waits in a thread: a heartbeat on
the worker's event loop shows no stall, while a view that waits on the loop itself stalls it.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from web_fixtures import DjangoServer

from lockkit_core import LockKit
from lockkit_core.testing import http_call

DUPLICATES = 8


def overlap(server: DjangoServer, name: str) -> tuple[int, int]:
    """(running now, most ever running at once) of the view runs counted under ``name``."""
    path = server.data / f"overlap-{name}.txt"
    if not path.exists():
        return 0, 0
    now, most = (int(x) for x in path.read_text().split())
    return now, most


def duplicates(server: DjangoServer, path: str) -> list[int]:
    """``DUPLICATES`` POSTs of ``path`` at once; their statuses."""
    with ThreadPoolExecutor(DUPLICATES) as pool:
        replies = pool.map(lambda _: http_call(server.port, "POST", path), range(DUPLICATES))
        return [status for status, _, _ in replies]


def test_both_workers_serve_async_requests(djproject_uvicorn: DjangoServer) -> None:
    assert len(djproject_uvicorn.pids()) == 2


def test_without_a_lock_async_duplicates_overlap(djproject_uvicorn: DjangoServer) -> None:
    name = f"u{uuid.uuid4().hex[:8]}"
    statuses = duplicates(djproject_uvicorn, f"/aoverlap/unlocked/{name}/?sleep=0.3")
    assert statuses == [200] * DUPLICATES
    assert overlap(djproject_uvicorn, name)[1] >= 2, "the duplicates never overlapped"


@pytest.mark.parametrize(
    "path", ["/aoverlap/locked/{name}/", "/mw/aoverlap/{name}/"], ids=["lock_view", "middleware"]
)
def test_one_async_duplicate_runs_at_a_time_the_others_get_409(
    djproject_uvicorn: DjangoServer, path: str
) -> None:
    name = f"l{uuid.uuid4().hex[:8]}"
    for _ in range(3):  # repeated bursts: each one starts after the last released its lock
        statuses = duplicates(djproject_uvicorn, path.format(name=name) + "?sleep=0.3")
        assert set(statuses) <= {200, 409}
        assert 200 in statuses and 409 in statuses
    assert overlap(djproject_uvicorn, name) == (0, 1)


def _hold_then_release(url: str, key: str, seconds: float) -> threading.Event:
    """Hold ``key`` from this test process for ``seconds``; the event is set once it is held."""
    held = threading.Event()

    def run() -> None:
        with LockKit(url) as kit, kit.lock(key, reentrant=False):
            held.set()
            time.sleep(seconds)

    threading.Thread(target=run, daemon=True).start()
    assert held.wait(10)
    return held


def _wait_on_lock(server: DjangoServer, path: str) -> tuple[float, dict[str, float], list[float]]:
    """POST ``path`` while the test holds its lock for 1.5 s, and ping the server meanwhile:
    (seconds the POST took, its answer, ping latencies)."""
    pings: list[float] = []
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        waiter = pool.submit(http_call, server.port, "POST", path)
        while not waiter.done() and len(pings) < 40:
            time.sleep(0.05)
            ping_start = time.monotonic()
            assert http_call(server.port, "GET", "/aping", timeout=10)[0] == 200
            pings.append(time.monotonic() - ping_start)
        status, _, body = waiter.result()
        took = time.monotonic() - started
    assert status == 200, body
    return took, json.loads(body), pings


def test_a_lock_wait_never_blocks_the_event_loop(djproject_uvicorn: DjangoServer) -> None:
    name = uuid.uuid4().hex[:8]
    _hold_then_release(djproject_uvicorn.lock_url, f"await:{name}", 1.5)
    took, answer, pings = _wait_on_lock(djproject_uvicorn, f"/await/{name}/?window=3")
    assert took >= 1.0, "the request did not wait for the lock"
    # The waiting worker's loop kept running: no stall near the wait's length ...
    assert answer["max_gap"] < 0.5, answer
    # ... and unrelated requests were answered meanwhile.
    assert pings and max(pings) < 1.0, pings


def test_the_loop_watch_sees_a_wait_that_blocks_the_loop(djproject_uvicorn: DjangoServer) -> None:
    # The same wait done on the event loop stalls it: the watch above can fail.
    name = uuid.uuid4().hex[:8]
    _hold_then_release(djproject_uvicorn.lock_url, f"await:{name}", 1.5)
    took, answer, _ = _wait_on_lock(djproject_uvicorn, f"/await-blocking/{name}/?window=3")
    assert took >= 1.0
    assert answer["max_gap"] >= 0.8, answer


def test_concurrent_idempotent_async_duplicates_run_once(djproject_uvicorn: DjangoServer) -> None:
    name, key = uuid.uuid4().hex[:10], f'"{uuid.uuid4()}"'
    # The caller, as a view with token auth knows it: a key is kept per caller.
    headers = {"Idempotency-Key": key, "Content-Type": "application/json",
               "Authorization": "Token 6f1e0c2b9a8d"}  # fmt: skip

    def charge(_: int) -> tuple[int, bytes]:
        path = f"/idem/async/{name}/?sleep=0.5"
        status, _, body = http_call(djproject_uvicorn.port, "POST", path, b"{}", headers)
        return status, body

    with ThreadPoolExecutor(DUPLICATES) as pool:
        replies = list(pool.map(charge, range(DUPLICATES)))
    statuses = [status for status, _ in replies]
    assert set(statuses) <= {201, 409} and 201 in statuses and 409 in statuses
    runs = json.loads(http_call(djproject_uvicorn.port, "GET", f"/idem/runs/{name}/")[2])
    assert runs["runs"] == 1
    status, items, body = http_call(
        djproject_uvicorn.port, "POST", f"/idem/async/{name}/?sleep=0.5", b"{}", headers
    )
    assert (status, dict(items)["Idempotency-Replayed"]) == (201, "true")
    assert body == next(b for s, b in replies if s == 201)
