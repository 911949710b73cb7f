"""LockMiddleware through Django's test clients: rules from settings.LOCKKIT."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import AsyncClient, Client, override_settings

from lockkit_core.testing.servers import free_port
from lockkit_django import PROBLEM_JSON, get_kit

PLAIN = r"^/plain[a-z-]*/(?P<name>\w+)/$"


def lockkit(**rule: Any) -> dict[str, Any]:
    url = rule.pop("url", "memory://middleware")
    options = rule.pop("options", {})
    return {
        "URL": url,
        "OPTIONS": options,
        "MIDDLEWARE": {"RULES": [{"PATH": PLAIN, "KEY": "plain:{name}", **rule}]},
    }


@pytest.fixture
def client() -> Iterator[Client]:
    with override_settings(LOCKKIT=lockkit(METHODS=["POST"])):
        yield Client(raise_request_exception=False)


def test_a_matching_request_runs_under_the_rule_lock(client: Client) -> None:
    assert client.post("/plain/a/").json() == {"held": True}
    assert get_kit().admin.info("plain:a") is None
    assert client.get("/plain/a/").json() == {"held": False}  # METHODS=["POST"]
    assert client.post("/held/a/").json()["held"] is True  # no rule: only its decorator


def test_a_busy_rule_answers_409_with_retry_after(client: Client) -> None:
    with get_kit().lock("plain:b"):
        response = client.post("/plain/b/")
        assert client.get("/plain/b/").status_code == 200
    assert response.status_code == 409
    assert response["Content-Type"] == PROBLEM_JSON
    assert response["Retry-After"] == "1"
    assert json.loads(response.content)["lock"] == "plain:b"


def test_an_exception_releases_the_lock(client: Client) -> None:
    assert client.post("/plain-boom/c/").status_code == 500
    assert get_kit().admin.info("plain:c") is None


@pytest.mark.django_db
def test_a_stream_holds_the_lock_until_closed() -> None:
    with override_settings(LOCKKIT=lockkit()):
        response = Client().get("/plain-stream/d/")
        assert get_kit().admin.info("plain:d") is not None  # the view returned, bytes to come
        # The test client closes the response once its stream is read to the end.
        assert b"".join(response.streaming_content) == b"held\nheld\n"
        assert get_kit().admin.info("plain:d") is None


@pytest.mark.django_db(transaction=True)
def test_under_atomic_requests_the_lock_outlasts_the_commit(client: Client) -> None:
    from django.db import connections
    from djproject import views

    views.COMMITS.clear()
    connections["default"].settings_dict["ATOMIC_REQUESTS"] = True
    try:
        response = client.post("/plain-atomic/h/")
    finally:
        connections["default"].settings_dict["ATOMIC_REQUESTS"] = False
    assert response.json() == {"in_atomic": True}
    assert views.COMMITS == [True]
    assert get_kit().admin.info("plain:h") is None


def test_key_function_wait_and_on_busy_from_dotted_paths() -> None:
    rule = lockkit(
        KEY="callable:djproject.views.key_from_header",
        ON_BUSY="djproject.views.teapot",
        WAIT=0.2,
    )
    with override_settings(LOCKKIT=rule):
        client = Client()
        assert client.post("/plain/e/", headers={"X-Name": "e"}).json() == {"held": True}
        with get_kit().lock("plain:e"):
            response = client.post("/plain/e/", headers={"X-Name": "e"})
    assert response.status_code == 418
    assert b"plain:e" in response.content


def test_store_down_503_or_fail_open(caplog: pytest.LogCaptureFixture) -> None:
    dead: dict[str, Any] = {
        "url": f"redis://127.0.0.1:{free_port()}/0",
        "options": {"socket_timeout": 0.5},
        "PATH": "^/health$",
        "KEY": "health",
    }
    with caplog.at_level(logging.WARNING, "lockkit.django"):
        with override_settings(LOCKKIT=lockkit(**dead)):
            response = Client().post("/health")
        assert response.status_code == 503
        assert response["Content-Type"] == PROBLEM_JSON
        with override_settings(LOCKKIT=lockkit(FAIL_OPEN=True, **dead)):
            assert Client().post("/health").content == b"ok"
    messages = [r.getMessage() for r in caplog.records]
    assert any("refused (503)" in m for m in messages)
    assert any("WITHOUT its lock" in m for m in messages)


def test_async_requests_are_locked_too() -> None:
    async def run() -> None:
        client = AsyncClient()
        assert (await client.post("/plain-async/g/")).json() == {"held": True}
        lock = get_kit().lock("plain:g", reentrant=False)
        await asyncio.to_thread(lock.acquire)
        try:
            assert (await client.post("/plain-async/g/")).status_code == 409
        finally:
            await asyncio.to_thread(lock.release)

    with override_settings(LOCKKIT=lockkit()):
        asyncio.run(run())


def test_a_key_without_form_fields_leaves_the_body_to_the_view() -> None:
    from django.http import HttpRequest, HttpResponse
    from django.test import RequestFactory

    from lockkit_django import lock_view

    @lock_view("body:{query[id]}")
    def echo(request: HttpRequest) -> HttpResponse:
        # Raises RawPostDataException if the lock had parsed the multipart body first.
        return HttpResponse(request.body)

    request = RequestFactory().post("/echo/?id=1", data={"file": "contents"})
    with override_settings(LOCKKIT={"URL": "memory://body"}):
        assert b"contents" in echo(request).content
