"""What a request can put into a lock key, through Django's test client: a session key is a
bearer credential and is never shown; a key is bounded in size and free of NUL; a stream does
not hold its lock for as long as a slow client reads."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings

from lockkit_django import PROBLEM_JSON, get_kit

# Transactional: inside a test-wide transaction a lock is released only at a commit that
# never comes.
pytestmark = pytest.mark.django_db(transaction=True)


def with_session() -> tuple[Client, str]:
    client = Client(raise_request_exception=False)
    session = client.session
    session["cart"] = "c1"
    session.save()
    client.cookies["sessionid"] = session.session_key
    return client, str(session.session_key)


def test_the_session_key_is_never_shown_in_keys_answers_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, session_id = with_session()
    with caplog.at_level(logging.DEBUG, "lockkit"):
        first = client.post("/safe/cart/")
        assert first.status_code == 200
        (key,) = first.json()["keys"]
        listed = [info.key for info in get_kit().admin.list()]
        with get_kit().lock(key, timeout=5):  # the same session: the same hashed key, busy
            listed += [info.key for info in get_kit().admin.list()]
            busy = client.post("/safe/cart/")
    assert busy.status_code == 409
    assert key.startswith("cart:") and len(key) < 80
    shown = [key, *listed, busy.content.decode(), *(r.getMessage() for r in caplog.records)]
    assert not [s for s in shown if session_id in s]
    other, _ = with_session()
    assert other.post("/safe/cart/").json()["keys"] != [key]  # another session, another key


def test_a_huge_request_value_is_a_400_and_leaves_nothing_in_the_store() -> None:
    client = Client(raise_request_exception=False)
    huge = "x" * 1_000_000
    for response in (
        client.post(f"/safe/search/?q={huge}", {"f": "a"}),
        client.post("/safe/search/?q=a", {"f": huge}),
    ):
        assert response.status_code == 400
        assert response["Content-Type"] == PROBLEM_JSON
        problem = json.loads(response.content)
        assert "512 bytes" in problem["detail"]
        assert len(response.content) < 2000
    assert get_kit().admin.list("search:") == []
    assert client.post("/safe/search/?q=a", {"f": "b"}).status_code == 200


def test_max_key_bytes_follows_the_setting() -> None:
    client = Client(raise_request_exception=False)
    with override_settings(LOCKKIT={"URL": "memory://cap", "MAX_KEY_BYTES": 20}):
        assert client.post("/safe/search/?q=abc", {"f": "d"}).status_code == 200
        assert client.post("/safe/search/?q=" + "é" * 8, {"f": "d"}).status_code == 400


@pytest.mark.parametrize("where", ["query", "form", "url"])
def test_a_nul_in_a_request_value_is_a_400(where: str) -> None:
    client = Client(raise_request_exception=False)
    if where == "query":
        response = client.post("/safe/search/?q=a%00b", {"f": "x"})
    elif where == "form":
        response = client.post("/safe/search/?q=a", {"f": "a\x00b"})
    else:
        response = client.get("/safe/export/a%00b/")
    assert response.status_code == 400
    assert response["Content-Type"] == PROBLEM_JSON
    assert "NUL" in json.loads(response.content)["detail"]


def test_a_stream_read_slowly_gives_its_lock_up_after_stream_max_hold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lockkit: dict[str, Any] = {"URL": "memory://streams", "STREAM_MAX_HOLD": 0.5}
    with override_settings(LOCKKIT=lockkit), caplog.at_level(logging.WARNING, "lockkit"):
        response = Client().get("/safe/export/a/")
        rows = iter(response.streaming_content)  # type: ignore[attr-defined]
        assert next(rows) == b'{"row": 0}\n'
        assert get_kit().admin.info("export:a") is not None
        time.sleep(1.0)  # a slow client: the rest is read long after STREAM_MAX_HOLD
        assert get_kit().admin.info("export:a") is None
        assert b"".join(rows) == b'{"row": 1}\n{"row": 2}\n'
        response.close()
        from lockkit_django.conf import lockkit_state

        assert lockkit_state().counts["stream_max_hold"] == 1
    assert any("STREAM_MAX_HOLD" in r.getMessage() for r in caplog.records)


def test_a_stream_closed_in_time_keeps_its_lock_until_then() -> None:
    with override_settings(LOCKKIT={"URL": "memory://streams2", "STREAM_MAX_HOLD": 5}):
        response = Client().get("/safe/export/b/")
        rows = iter(response.streaming_content)  # type: ignore[attr-defined]
        assert next(rows) == b'{"row": 0}\n'
        time.sleep(0.2)
        assert get_kit().admin.info("export:b") is not None
        # The test client closes the response once its content is read.
        assert b"".join(rows) == b'{"row": 1}\n{"row": 2}\n'
        assert get_kit().admin.info("export:b") is None
        from lockkit_django.conf import lockkit_state

        assert lockkit_state().counts["stream_max_hold"] == 0


@pytest.mark.parametrize("store", ["file", pytest.param("redis", marks=pytest.mark.redis)])
def test_the_session_key_never_names_anything_in_the_store(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if store == "file":
        url = f"file://{tmp_path}/locks"
    else:
        url = request.getfixturevalue("redis_server").url
    client, session_id = with_session()
    with override_settings(LOCKKIT={"URL": url, "NAMESPACE": f"s{time.monotonic_ns()}"}):
        (key,) = client.post("/safe/cart/").json()["keys"]
        assert client.post("/safe/cart/").json()["keys"] == [key]  # the same session, same key
    # What the store keeps after the request: a file record (for ten seconds), a Redis fence
    # counter (for a day), each named after the key.
    if store == "file":
        names = [p.name for p in (tmp_path / "locks").iterdir()]
    else:
        import redis

        names = [k.decode() for k in redis.Redis.from_url(url).keys("*")]
    assert names
    assert not [n for n in names if session_id in n]
