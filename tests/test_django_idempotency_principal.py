"""Whose response an Idempotency-Key replays, through Django's test client on a real store
(file:// locks with FileBasedCache, and a real redis-server for both).

APIs that authenticate inside the view (token auth, JWT, API keys) have no user and no
session when the idempotency layer runs: the caller is told apart by a keyed hash of its
Authorization header, or by SCOPE; a caller with none of these is not kept at all. A kept
response never carries Set-Cookie: a replay must not hand a session to anyone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from djchecks import run_checks
from djproject.models import Charge
from idempotency_stores import STORES, idempotency_store

pytestmark = pytest.mark.django_db(transaction=True)

KEY = '"0b6c6a52-3f1d-4a36-9d0e-5f1b7f5a0c11"'
BODY = json.dumps({"amount": 1200})
ALICE = "Token 4f9c2a7e1b3d5c6a8e0f"
BOB = "Token 9a8b7c6d5e4f3a2b1c0d"


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """LOCKKIT and CACHES for one store; yields the LOCKKIT mapping."""
    with idempotency_store(request, tmp_path, "idem-p") as lockkit:
        yield lockkit


def post(client: Client, path: str, auth: str | None = None) -> Any:
    headers = {"Idempotency-Key": KEY}
    if auth is not None:
        headers["Authorization"] = auth
    return client.post(path, BODY, content_type="application/json", headers=headers)


def runs(name: str) -> int:
    return Charge.objects.filter(name=name).count()


@pytest.mark.parametrize("route", ["idem", "mw-idem"], ids=["decorator", "middleware"])
def test_two_api_callers_with_the_same_key_get_their_own_responses(
    store: dict[str, Any], route: str
) -> None:
    path = f"/{route}/charge/a/"
    alice = post(Client(), path, ALICE)
    bob = post(Client(), path, BOB)  # Alice's key, Bob's own credentials
    assert (alice.status_code, bob.status_code) == (201, 201)
    assert "Idempotency-Replayed" not in bob
    assert bob.json()["charge"] != alice.json()["charge"]
    assert bob.cookies["last_charge"].value == bob["X-Charge-Id"]  # Bob's own, not Alice's
    again = post(Client(), path, ALICE)
    assert again["Idempotency-Replayed"] == "true"
    assert again.content == alice.content
    assert runs("a") == 2


def test_a_replay_never_carries_set_cookie(store: dict[str, Any]) -> None:
    user = User.objects.create_user("carol")
    client = Client()
    client.force_login(user)
    first = post(client, "/idem/charge/b/")
    assert first.cookies["last_charge"].value == first["X-Charge-Id"]
    again = Client()
    again.force_login(user)
    replay = post(again, "/idem/charge/b/")
    assert replay["Idempotency-Replayed"] == "true"
    assert replay.content == first.content
    assert "last_charge" not in replay.cookies
    assert not replay.cookies
    assert "Set-Cookie" not in replay
    assert runs("b") == 1


def test_a_caller_without_principal_is_neither_kept_nor_replayed(
    store: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "lockkit.django"):
        first = post(Client(), "/idem/charge/c/")
        second = post(Client(), "/idem/charge/c/")  # anyone else, sending the same key
    for response in (first, second):
        assert response.status_code == 201
        assert "Idempotency-Replayed" not in response
    assert first.json()["charge"] != second.json()["charge"]
    assert runs("c") == 2
    assert any("SCOPE" in r.getMessage() for r in caplog.records)


def test_with_scope_anonymous_callers_are_kept_by_it(store: dict[str, Any]) -> None:
    scoped = {**store, "IDEMPOTENCY": {**store["IDEMPOTENCY"],
                                       "SCOPE": "djproject.idem_views.customer"}}  # fmt: skip
    with override_settings(LOCKKIT=scoped):
        unnamed = [post(Client(), "/idem/charge/d/") for _ in range(2)]
        assert not [r for r in unnamed if "Idempotency-Replayed" in r]
        headers = {"Idempotency-Key": KEY, "X-Customer": "c1"}
        kept = Client().post("/idem/charge/d/", BODY, "application/json", headers=headers)
        again = Client().post("/idem/charge/d/", BODY, "application/json", headers=headers)
    assert again["Idempotency-Replayed"] == "true"
    assert again.content == kept.content
    assert runs("d") == 3  # callers SCOPE does not name are still not kept


def test_idempotency_without_scope_is_lockkit_w006() -> None:
    def warned(idempotency: dict[str, Any]) -> list[str]:
        lockkit = {"URL": "memory://x", "IDEMPOTENCY": idempotency}
        with override_settings(LOCKKIT=lockkit, SILENCED_SYSTEM_CHECKS=[]):
            return [m.msg for m in run_checks() if m.id == "lockkit.W006"]

    (message,) = warned({"PATHS": [r"^/api/"]})
    assert "SCOPE" in message and "Authorization" in message
    assert warned({"PATHS": [r"^/api/"], "SCOPE": "djproject.idem_views.customer"}) == []
