"""Idempotency-Key through Django's test clients, on a real store: file:// locks with Django's
FileBasedCache, and a real redis-server holding both the locks and the responses (RedisCache).

Concurrent duplicates against a multi-process server: tests/test_django_idempotency_server.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.test import AsyncClient, Client, override_settings
from djchecks import run_checks
from djproject import idem_views
from djproject.models import Charge
from idempotency_stores import STORES, idempotency_store

from lockkit_core import ConfigError
from lockkit_core.testing.servers import free_port
from lockkit_django import PROBLEM_JSON, get_kit, idempotent

# Transactional tests: inside a test-wide transaction, responses would be kept (and keys
# released) only at a commit that never comes (see the ATOMIC_REQUESTS test below).
pytestmark = pytest.mark.django_db(transaction=True)

KEY = '"8e03978e-40d5-43e8-bc93-6894a57f9324"'
# The caller as the view would authenticate it (token auth): a key is kept per caller, and a
# request nothing identifies is not kept (tests/test_django_idempotency_principal.py).
AUTH = "Token 6f1e0c2b9a8d"
BODY = json.dumps({"amount": 1200})


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """LOCKKIT and CACHES for one store; yields the LOCKKIT mapping."""
    with idempotency_store(request, tmp_path, "idem") as lockkit:
        yield lockkit


def post(
    client: Client,
    path: str,
    body: str = BODY,
    key: str | None = KEY,
    auth: str | None = AUTH,
    **kw: Any,
) -> Any:
    headers = {} if key is None else {"Idempotency-Key": key}
    if auth is not None:
        headers["Authorization"] = auth
    return client.post(path, body, content_type="application/json", headers=headers, **kw)


def runs(name: str) -> int:
    return Charge.objects.filter(name=name).count()


def same_response(first: Any, again: Any) -> None:
    """Status, reason, every header and the body bytes are the first's; no cookie is replayed."""
    assert again.status_code == first.status_code
    assert again.reason_phrase == first.reason_phrase
    assert again.content == first.content
    headers = {k: v for k, v in again.items() if k != "Idempotency-Replayed"}
    assert headers == dict(first.items())
    assert not again.cookies and "Set-Cookie" not in again
    assert again["Idempotency-Replayed"] == "true"
    assert "Idempotency-Replayed" not in first


@pytest.mark.parametrize(
    "path", ["/idem/charge/a/", "/mw-idem/charge/a/", "/idem/declined/a/"],
    ids=["decorator", "middleware", "error-response"],
)  # fmt: skip
def test_a_retry_gets_the_first_response_byte_for_byte(store: dict[str, Any], path: str) -> None:
    client = Client()
    first = post(client, path)
    assert first.status_code in (201, 402)
    assert first.cookies["last_charge"].value == first["X-Charge-Id"]
    again = post(client, path)
    same_response(first, again)
    assert runs("a") == 1


def test_without_a_key_every_request_runs(store: dict[str, Any]) -> None:
    client = Client()
    answers = {post(client, "/idem/charge/b/", key=None).json()["charge"] for _ in range(2)}
    assert len(answers) == 2
    assert runs("b") == 2


def test_the_same_key_with_another_payload_is_422(store: dict[str, Any]) -> None:
    client = Client()
    assert post(client, "/idem/charge/c/").status_code == 201
    other_body = post(client, "/idem/charge/c/", body=json.dumps({"amount": 9999}))
    other_query = post(client, "/idem/charge/c/?currency=usd")
    other_type = client.post(
        "/idem/charge/c/", BODY, content_type="text/plain",
        headers={"Idempotency-Key": KEY, "Authorization": AUTH},
    )  # fmt: skip
    for response in (other_body, other_query, other_type):
        assert response.status_code == 422
        assert response["Content-Type"] == PROBLEM_JSON
        assert json.loads(response.content)["status"] == 422
    assert runs("c") == 1
    assert post(client, "/idem/charge/c/").status_code == 201  # the original still replays


@pytest.mark.parametrize(
    "header",
    ["8e03978e", '""', '"' + "k" * 256 + '"', '"unterminated', '"a\\b"', '"é"', '"a", "b"'],
    ids=["unquoted", "empty", "too-long", "unterminated", "bad-escape", "non-ascii", "list"],
)
def test_a_malformed_key_is_400(store: dict[str, Any], header: str) -> None:
    response = post(Client(), "/idem/charge/d/", key=header)
    assert response.status_code == 400
    assert response["Content-Type"] == PROBLEM_JSON
    assert "Idempotency-Key" in json.loads(response.content)["detail"]
    assert runs("d") == 0


def test_sf_string_escapes_and_parameters_are_understood(store: dict[str, Any]) -> None:
    client = Client()
    first = post(client, "/idem/charge/e/", key='"a\\"b\\\\c";v=1')
    again = post(client, "/idem/charge/e/", key='"a\\"b\\\\c"')  # parameters are ignored
    same_response(first, again)
    assert runs("e") == 1


def test_a_required_key_that_is_missing_is_400(store: dict[str, Any]) -> None:
    client = Client()
    missing = post(client, "/idem/required/f/", key=None)
    assert missing.status_code == 400
    assert "requires an Idempotency-Key" in json.loads(missing.content)["detail"]
    assert runs("f") == 0
    assert post(client, "/idem/required/f/").status_code == 201


def test_a_kept_response_expires(store: dict[str, Any]) -> None:
    client = Client()
    first = post(client, "/idem/short/g/")
    same_response(first, post(client, "/idem/short/g/"))
    time.sleep(2.1)  # expires=1; whole seconds on every cache
    later = post(client, "/idem/short/g/")
    assert later.status_code == 201
    assert "Idempotency-Replayed" not in later
    assert later.json()["charge"] != first.json()["charge"]
    assert runs("g") == 2


def test_two_users_with_the_same_key_do_not_collide(store: dict[str, Any]) -> None:
    alice, bob = (User.objects.create_user(n) for n in ("alice", "bob"))
    as_alice, as_bob = Client(), Client()
    as_alice.force_login(alice)
    as_bob.force_login(bob)
    a = post(as_alice, "/idem/charge/h/")
    b = post(as_bob, "/idem/charge/h/")
    assert "Idempotency-Replayed" not in b
    assert a.json()["charge"] != b.json()["charge"]
    assert runs("h") == 2
    same_response(a, post(as_alice, "/idem/charge/h/"))
    # Another payload under bob's key is not a conflict with alice's.
    assert post(as_bob, "/idem/charge/h/", body="{}").status_code == 422
    # A caller nothing identifies is not kept; anonymous callers with sessions are told apart.
    anonymous = post(Client(), "/idem/charge/h/", auth=None)
    assert anonymous.json()["charge"] not in (a.json()["charge"], b.json()["charge"])
    assert runs("h") == 3
    carts = []
    for _ in range(2):
        client = Client()
        session = client.session
        session["cart"] = "c1"
        session.save()
        client.cookies["sessionid"] = session.session_key
        carts.append(post(client, "/idem/charge/h/", auth=None))
        same_response(carts[-1], post(client, "/idem/charge/h/", auth=None))
    assert carts[0].json()["charge"] != carts[1].json()["charge"]
    assert runs("h") == 5


def test_anonymous_callers_are_told_apart_by_scope(store: dict[str, Any]) -> None:
    scoped = {**store, "IDEMPOTENCY": {**store["IDEMPOTENCY"],
                                       "SCOPE": "djproject.idem_views.customer"}}  # fmt: skip
    with override_settings(LOCKKIT=scoped):
        first = post(Client(), "/idem/charge/q/", auth=None, HTTP_X_CUSTOMER="c1")
        other = post(Client(), "/idem/charge/q/", auth=None, HTTP_X_CUSTOMER="c2")
        again = post(Client(), "/idem/charge/q/", auth=None, HTTP_X_CUSTOMER="c1")
        same_response(first, again)
    assert "Idempotency-Replayed" not in other
    assert runs("q") == 2


def test_a_multipart_upload_is_fingerprinted_by_its_fields_and_files(
    store: dict[str, Any],
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    def upload(content: bytes) -> Any:
        data = {"note": "march", "receipt": SimpleUploadedFile("r.pdf", content)}
        headers = {"Idempotency-Key": KEY, "Authorization": AUTH}
        return Client().post("/idem/upload/r/", data, headers=headers)

    first = upload(b"%PDF-1.7 " * 1000)
    assert first.json()["size"] == 9000  # the view read the whole file after the digest
    same_response(first, upload(b"%PDF-1.7 " * 1000))  # a new boundary, the same payload
    assert upload(b"%PDF-1.7 other").status_code == 422
    assert runs("r") == 1


def test_a_key_is_scoped_by_route_and_method(store: dict[str, Any]) -> None:
    client = Client()
    one = post(client, "/idem/charge/i/")
    other_route = post(client, "/idem/declined/i/")
    assert "Idempotency-Replayed" not in other_route
    assert one.json()["charge"] != other_route.json()["charge"]
    headers = {"Idempotency-Key": KEY, "Authorization": AUTH}
    put = client.put("/idem/cbv/i/", BODY, content_type="application/json", headers=headers)
    assert put.status_code == 201 and "Idempotency-Replayed" not in put
    again = client.put("/idem/cbv/i/", BODY, content_type="application/json", headers=headers)
    same_response(put, again)
    assert runs("i") == 3


def test_async_views_replay_too(store: dict[str, Any]) -> None:
    async def twice() -> tuple[Any, Any]:
        client = AsyncClient()
        headers = {"Idempotency-Key": KEY, "Authorization": AUTH}
        first = await client.post("/idem/async/j/", BODY, "application/json", headers=headers)
        again = await client.post("/idem/async/j/", BODY, "application/json", headers=headers)
        return first, again

    first, again = asyncio.run(twice())
    assert first.status_code == 201
    same_response(first, again)
    assert runs("j") == 1


def test_a_stream_is_passed_through_and_not_kept(
    store: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    client = Client()
    with caplog.at_level(logging.WARNING, "lockkit.django"):
        for _ in range(2):
            response = post(client, "/idem/stream/k/")
            assert b"".join(response.streaming_content) == b"streamed\n"  # type: ignore[arg-type]
            assert "Idempotency-Replayed" not in response
    assert runs("k") == 2
    assert any("streaming response" in r.getMessage() for r in caplog.records)
    assert get_kit().admin.list("idempotency:") == []  # every key's lock was released


def test_a_running_first_request_makes_a_retry_409(store: dict[str, Any]) -> None:
    # The key's lock is what a running first request holds; hold it by hand.
    client = Client()
    from django.test import RequestFactory
    from django.urls import resolve

    from lockkit_django.idempotency.header import scope_of
    from lockkit_django.idempotency.settings import IdempotencySettings

    request = RequestFactory().post("/idem/charge/l/", HTTP_AUTHORIZATION=AUTH)
    request.resolver_match = resolve("/idem/charge/l/")
    scope = scope_of(request, KEY.strip('"'), IdempotencySettings())
    assert scope is not None
    with get_kit().lock(f"idempotency:{scope}", reentrant=False):
        busy = post(client, "/idem/charge/l/")
    assert busy.status_code == 409
    assert busy["Retry-After"] == "1"
    assert busy["Content-Type"] == PROBLEM_JSON
    assert runs("l") == 0
    assert post(client, "/idem/charge/l/").status_code == 201  # the 409 was not kept
    assert runs("l") == 1


def test_a_store_that_is_down_is_503_and_logged(
    store: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    lock_down = {**store, "URL": dead, "OPTIONS": {"socket_timeout": 0.5}}
    cache_down = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "idempotency": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                        "LOCATION": dead},
    }  # fmt: skip
    with caplog.at_level(logging.ERROR, "lockkit.django"):
        with override_settings(LOCKKIT=lock_down):
            locks = post(Client(), "/idem/charge/m/")
        with override_settings(CACHES=cache_down):
            cache = post(Client(), "/idem/charge/m/")
    for response in (locks, cache):
        assert response.status_code == 503
        assert response["Content-Type"] == PROBLEM_JSON
        assert response["Retry-After"] == "1"
    assert runs("m") == 0
    messages = [r.getMessage() for r in caplog.records]
    assert any("lock store is down" in m for m in messages)
    assert any("cache 'idempotency' is down" in m for m in messages)
    assert "cannot be reached" in json.loads(cache.content)["detail"]


def test_under_atomic_requests_the_response_is_kept_after_the_commit(
    store: dict[str, Any],
) -> None:
    idem_views.AT_COMMIT.clear()
    client = Client()
    connections["default"].settings_dict["ATOMIC_REQUESTS"] = True
    try:
        first = post(client, "/idem/atomic/n/")
        again = post(client, "/idem/atomic/n/")
        rolled_back = post(client, "/idem/atomic/o/?rollback=1", key='"o"')
        retry = post(client, "/idem/atomic/o/?rollback=1", key='"o"')
    finally:
        connections["default"].settings_dict["ATOMIC_REQUESTS"] = False
    same_response(first, again)
    assert idem_views.AT_COMMIT == [{"held": True}]  # the key was still locked at the commit
    assert runs("n") == 1
    # A rolled-back request keeps nothing: its key stays busy until the lock's ttl ends, and
    # no retry is told that the rolled-back charge happened.
    assert rolled_back.status_code == 201 and runs("o") == 0
    assert retry.status_code == 409
    for held in get_kit().admin.list("idempotency:"):
        get_kit().admin.force_release(held.key)


@pytest.mark.parametrize(
    "idempotency",
    [
        [],
        {"EXPIRES": 0},
        {"EXPIRES": 1.5},
        {"CACHE": "nope"},
        {"METHODS": "POST"},
        {"METHODS": ["FETCH"]},
        {"REQUIRED": "yes"},
        {"MAX_KEY_LENGTH": 0},
        {"PATHS": ["("]},
        {"SCOPE": "no.such.func"},
        {"TTL": 5},
    ],
)
def test_bad_idempotency_settings_are_lockkit_e003(idempotency: object) -> None:
    with override_settings(LOCKKIT={"URL": "memory://x", "IDEMPOTENCY": idempotency}):
        errors = [m for m in run_checks() if m.id == "lockkit.E003"]
    assert len(errors) == 1
    assert "IDEMPOTENCY" in errors[0].msg


def test_bad_decorator_options_fail_when_decorating() -> None:
    with pytest.raises(ConfigError, match="EXPIRES"):
        idempotent(expires=-1)
    with pytest.raises(ConfigError, match="CACHE"):
        idempotent(cache="nope")
    with pytest.raises(ConfigError, match="METHODS"):
        idempotent(methods="POST")


def test_a_per_process_cache_is_lockkit_w004(tmp_path: Path) -> None:
    def warned(backend: str) -> bool:
        caches = {"default": {"BACKEND": backend, "LOCATION": str(tmp_path)}}
        lockkit = {"URL": "memory://x", "IDEMPOTENCY": {"EXPIRES": 60}}
        with override_settings(LOCKKIT=lockkit, CACHES=caches, SILENCED_SYSTEM_CHECKS=[]):
            return any(m.id == "lockkit.W004" for m in run_checks())

    assert warned("django.core.cache.backends.locmem.LocMemCache")
    assert warned("django.core.cache.backends.dummy.DummyCache")
    assert not warned("django.core.cache.backends.filebased.FileBasedCache")


@pytest.mark.django_db(transaction=False)
def test_in_a_test_wide_transaction_capture_on_commit_callbacks_keeps_responses(
    store: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    client = Client()
    with django_capture_on_commit_callbacks(execute=True):
        first = post(client, "/idem/charge/p/")
    with django_capture_on_commit_callbacks(execute=True):
        again = post(client, "/idem/charge/p/")
    same_response(first, again)


def test_idempotency_middleware_before_authentication_is_lockkit_w005() -> None:
    from django.conf import settings

    auth = "django.contrib.auth.middleware.AuthenticationMiddleware"
    ours = "lockkit_django.middleware.IdempotencyMiddleware"
    wrong = [m for m in settings.MIDDLEWARE if m != ours]
    wrong.insert(wrong.index(auth), ours)
    with override_settings(MIDDLEWARE=wrong):
        assert any(m.id == "lockkit.W005" for m in run_checks())
    assert not any(m.id == "lockkit.W005" for m in run_checks())
