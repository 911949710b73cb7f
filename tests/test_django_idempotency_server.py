"""Idempotency-Key under a real multi-process server: tests/djproject under gunicorn (2 workers
x 4 gthread threads), with file:// locks and FileBasedCache, and with a real redis-server for
both; concurrent retries from real HTTP clients.

The charge view sleeps ``?sleep=`` seconds and records each run of its body in the database;
its twin ``/unidem/`` is the same view without ``@idempotent``.
"""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from web_fixtures import DjangoServer

from lockkit_core import LockKit
from lockkit_core.testing import http_call, raw_http
from lockkit_django import PROBLEM_JSON

DUPLICATES = 8
BODY = json.dumps({"amount": 1200}).encode()
# The caller, as a view with token auth knows it: keys are kept per caller.
AUTH = "Token 6f1e0c2b9a8d"


def new_key() -> str:
    return f'"{uuid.uuid4()}"'


def post(
    server: DjangoServer, path: str, key: str | None, body: bytes = BODY
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json", "Authorization": AUTH}
    if key is not None:
        headers["Idempotency-Key"] = key
    status, items, content = http_call(server.port, "POST", path, body, headers)
    return status, {k.lower(): v for k, v in items}, content


def runs(server: DjangoServer, name: str) -> int:
    count: int = json.loads(http_call(server.port, "GET", f"/idem/runs/{name}/")[2])["runs"]
    return count


def raw_post(server: DjangoServer, path: str, key: str) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Idempotency-Key: {key}\r\nAuthorization: {AUTH}\r\n"
        f"Content-Length: {len(BODY)}\r\nConnection: close\r\n\r\n"
    )
    return raw_http(server.port, head.encode() + BODY)


def without(raw: bytes, *names: bytes) -> bytes:
    """``raw`` without the header lines called ``names`` (lower case)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = [line for line in head.split(b"\r\n") if line.split(b":", 1)[0].lower() not in names]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@pytest.mark.parametrize("route", ["idem", "mw-idem"], ids=["decorator", "middleware"])
def test_a_retry_gets_the_same_bytes(djproject_gunicorn: DjangoServer, route: str) -> None:
    name, key = uuid.uuid4().hex[:10], new_key()
    first = raw_post(djproject_gunicorn, f"/{route}/charge/{name}/", key)
    again = raw_post(djproject_gunicorn, f"/{route}/charge/{name}/", key)
    assert first.startswith(b"HTTP/1.1 201 Created\r\n")
    assert b"\r\nIdempotency-Replayed: true\r\n" in again
    assert b"\r\nSet-Cookie: last_charge=" in first
    # Every byte but the server's Date, the replay marker and the cookies (never replayed):
    # status line, headers, body (whose charge id a second run would have changed).
    assert b"\r\nSet-Cookie:" not in again
    assert without(again, b"date", b"idempotency-replayed") == without(
        first, b"date", b"set-cookie"
    )
    assert runs(djproject_gunicorn, name) == 1


def _lock_appears(url: str, first: Future[Any], timeout: float = 30.0) -> None:
    with LockKit(url) as kit:
        deadline = time.monotonic() + timeout
        while not kit.admin.list("idempotency:"):
            done = first.result() if first.done() else "still running"
            assert time.monotonic() < deadline, f"the first request never took its lock: {done}"
            time.sleep(0.02)


def test_a_retry_while_the_first_runs_is_409_then_replays(djproject_gunicorn: DjangoServer) -> None:
    name, key = uuid.uuid4().hex[:10], new_key()
    path = f"/idem/charge/{name}/?sleep=2.5"
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(post, djproject_gunicorn, path, key)
        _lock_appears(djproject_gunicorn.lock_url, first)
        status, headers, body = post(djproject_gunicorn, path, key)
        assert status == 409
        assert headers["retry-after"] == "1"
        assert headers["content-type"] == PROBLEM_JSON
        assert "still being processed" in json.loads(body)["detail"]
        first_status, _, first_body = first.result()
    assert first_status == 201
    status, headers, body = post(djproject_gunicorn, path, key)
    assert (status, body, headers["idempotency-replayed"]) == (201, first_body, "true")
    assert runs(djproject_gunicorn, name) == 1


def _burst(server: DjangoServer, path: str, key: str) -> list[tuple[int, dict[str, str], bytes]]:
    with ThreadPoolExecutor(DUPLICATES) as pool:
        return list(pool.map(lambda _: post(server, path, key), range(DUPLICATES)))


@pytest.mark.parametrize("route", ["idem", "mw-idem"], ids=["decorator", "middleware"])
def test_concurrent_duplicates_run_the_view_once(
    djproject_gunicorn: DjangoServer, route: str
) -> None:
    # Without idempotency the same burst runs the charge several times: the race is real.
    twin = uuid.uuid4().hex[:10]
    _burst(djproject_gunicorn, f"/unidem/charge/{twin}/?sleep=0.5", new_key())
    assert runs(djproject_gunicorn, twin) > 1
    name, key = uuid.uuid4().hex[:10], new_key()
    replies = _burst(djproject_gunicorn, f"/{route}/charge/{name}/?sleep=0.5", key)
    assert runs(djproject_gunicorn, name) == 1
    statuses = [status for status, _, _ in replies]
    assert set(statuses) <= {201, 409}
    assert 201 in statuses and 409 in statuses
    assert len({body for status, _, body in replies if status == 201}) == 1


def test_another_payload_is_422_and_a_missing_required_key_400(
    djproject_gunicorn: DjangoServer,
) -> None:
    name, key = uuid.uuid4().hex[:10], new_key()
    assert post(djproject_gunicorn, f"/idem/charge/{name}/", key)[0] == 201
    status, headers, _ = post(djproject_gunicorn, f"/idem/charge/{name}/", key, body=b"{}")
    assert (status, headers["content-type"]) == (422, PROBLEM_JSON)
    status, headers, _ = post(djproject_gunicorn, f"/idem/required/{name}/", None)
    assert (status, headers["content-type"]) == (400, PROBLEM_JSON)
    assert runs(djproject_gunicorn, name) == 1
