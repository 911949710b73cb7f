"""The admin page for locks, through Django's test client: who may see it, what it lists,
and a force-release after a confirmation, with its log entry. The real-browser test against
a lock held by another process is test_django_admin_browser.py."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client

from lockkit_core import LockKit
from lockkit_core.testing import free_port

pytestmark = pytest.mark.django_db

LIST = "/admin/lockkit/lock/"
RELEASE = "/admin/lockkit/lock/release/"


def make_user(name: str, *perms: str, staff: bool = True) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=staff)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return user


def client_for(user: User, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


@pytest.fixture
def store(settings: Any, tmp_path: Path) -> Iterator[LockKit]:
    """settings.LOCKKIT on a fresh file:// store, and a kit of our own on it to hold locks."""
    url = f"file://{tmp_path / 'locks'}"
    settings.LOCKKIT = {"URL": url, "NAMESPACE": "admin"}
    with LockKit(url, namespace="admin", auto_renew=False, ttl=60) as kit:
        yield kit


@pytest.fixture
def operator() -> Client:
    return client_for(make_user("operator", "view_lock", "release_lock"))


def test_anonymous_and_non_staff_users_are_sent_to_the_login_page(store: LockKit) -> None:
    for client in (
        Client(),
        client_for(make_user("clerk", "view_lock", "release_lock", staff=False)),
    ):
        for response in (
            client.get(LIST),
            client.get(RELEASE, {"key": "k"}),
            client.post(RELEASE, {"key": "k"}),
        ):
            assert response.status_code == 302
            assert response["Location"].startswith("/admin/login/")


def test_staff_without_the_permission_are_refused(store: LockKit) -> None:
    client = client_for(make_user("intern"))
    assert client.get(LIST).status_code == 403
    assert b"/admin/lockkit/lock/" not in client.get("/admin/").content
    with store.lock("job:1"):
        assert client.post(RELEASE, {"key": "job:1"}).status_code == 403
        assert store.admin.info("job:1") is not None


def test_viewers_see_the_page_on_the_index_but_cannot_release(store: LockKit) -> None:
    client = client_for(make_user("viewer", "view_lock"))
    index = client.get("/admin/").content.decode()
    assert 'href="/admin/lockkit/lock/"' in index and "Locks" in index
    with store.lock("job:1") as held:
        page = client.get(LIST).content.decode()
        assert "job:1" in page and str(held.token) in page
        assert "Release&hellip;" not in page
        assert client.get(RELEASE, {"key": "job:1"}).status_code == 403
        assert client.post(RELEASE, {"key": "job:1"}).status_code == 403
        assert store.admin.info("job:1") is not None


def test_releasers_without_view_lock_are_refused(store: LockKit) -> None:
    # The confirmation page shows the lock's owner hint, token and holder: what view_lock
    # guards. Releasing also needs it, and the list offers no release to such a user.
    client = client_for(make_user("releaser", "release_lock"))
    with store.lock("job:1"):
        confirm = client.get(RELEASE, {"key": "job:1"})
        assert confirm.status_code == 403
        assert b"job:1" not in confirm.content
        assert client.post(RELEASE, {"key": "job:1"}).status_code == 403
        assert store.admin.info("job:1") is not None


def test_the_list_shows_each_lock_and_filters_by_prefix(store: LockKit, operator: Client) -> None:
    assert "No locks held" in operator.get(LIST).content.decode()
    with store.lock("order:1") as one, store.lock("order:2") as two, store.lock("report:x"):
        response = operator.get(LIST)
        assert response.status_code == 200
        rows = {row.key: row for row in response.context["rows"]}
        assert sorted(rows) == ["order:1", "order:2", "report:x"]
        row = rows["order:1"]
        assert (row.token, row.pid, row.host) == (one.token, os.getpid(), socket.gethostname())
        assert row.owner_hint == store.admin.info("order:1").owner_hint  # type: ignore[union-attr]
        assert row.ttl_remaining is not None and 50 < row.ttl_remaining <= 60
        page = response.content.decode()
        for text in (
            "order:1",
            row.owner_hint,
            socket.gethostname(),
            str(os.getpid()),
            str(two.token),
            "Release&hellip;",
            "file://",
        ):
            assert text in page
        filtered = operator.get(LIST, {"prefix": "order:"})
        assert [r.key for r in filtered.context["rows"]] == ["order:1", "order:2"]
        assert "report:x" not in filtered.content.decode()
        assert "No locks held under" in operator.get(LIST, {"prefix": "nope:"}).content.decode()


def test_release_asks_first_then_frees_the_key_and_logs_who_did_it(
    store: LockKit, caplog: pytest.LogCaptureFixture
) -> None:
    user = make_user("operator", "view_lock", "release_lock")
    client = client_for(user, enforce_csrf_checks=True)
    stale = store.lock("job:7", reentrant=False)
    assert stale.acquire()
    confirm = client.get(RELEASE, {"key": "job:7", "prefix": "job:"})
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert "Force-release" in page and "job:7" in page and "csrfmiddlewaretoken" in page
    assert store.admin.info("job:7") is not None  # asking frees nothing
    assert client.post(RELEASE, {"key": "job:7"}).status_code == 403  # no CSRF token
    assert store.admin.info("job:7") is not None
    token = confirm.cookies["csrftoken"].value
    with caplog.at_level(logging.WARNING, logger="lockkit"):
        done = client.post(
            RELEASE, {"key": "job:7", "prefix": "job:", "csrfmiddlewaretoken": token}
        )
    assert done.status_code == 302 and done["Location"] == LIST + "?prefix=job%3A"
    assert store.admin.info("job:7") is None
    entry = LogEntry.objects.get()
    assert (entry.user, entry.object_id, entry.action_flag) == (user, "job:7", DELETION)
    assert f"token {stale.token}" in entry.change_message
    assert any(
        "job:7" in r.getMessage() and "operator" in r.getMessage()
        for r in caplog.records
        if r.name == "lockkit.django"
    )
    after = client.get(done["Location"]).content.decode()
    assert "Released the lock &#x27;job:7&#x27;" in after and "No locks held" in after


def test_releasing_a_free_key_says_so(store: LockKit, operator: Client) -> None:
    response = operator.get(RELEASE, {"key": "gone"}, follow=True)
    assert "The lock &#x27;gone&#x27; is already free" in response.content.decode()
    response = operator.post(RELEASE, {"key": "gone"}, follow=True)
    assert "The lock &#x27;gone&#x27; was already free" in response.content.decode()
    assert not LogEntry.objects.exists()


def test_a_lock_released_between_confirm_and_post_is_reported_free(
    store: LockKit, operator: Client
) -> None:
    with store.lock("job:8"):
        assert operator.get(RELEASE, {"key": "job:8"}).status_code == 200
    response = operator.post(RELEASE, {"key": "job:8"}, follow=True)
    assert "The lock &#x27;job:8&#x27; was already free" in response.content.decode()


def test_a_store_that_is_down_is_shown_not_hidden(settings: Any, operator: Client) -> None:
    settings.LOCKKIT = {
        "URL": f"redis://127.0.0.1:{free_port()}/0",
        "OPTIONS": {"socket_timeout": 0.5, "socket_connect_timeout": 0.5},
    }
    response = operator.get(LIST)
    assert response.status_code == 503
    assert "The locks cannot be listed" in response.content.decode()
    released = operator.post(RELEASE, {"key": "k"}, follow=True).content.decode()
    assert "Could not release" in released


def test_the_store_line_and_its_errors_hide_the_password(settings: Any, operator: Client) -> None:
    secret = "s3cr3t-Pa55word"
    settings.LOCKKIT = {
        "URL": f"redis://ops:{secret}@127.0.0.1:{free_port()}/0?socket_timeout=0.5",
        "OPTIONS": {"socket_connect_timeout": 0.5},
    }
    page = operator.get(LIST).content.decode()
    assert "ops:***@127.0.0.1" in page  # the Store line is there, redacted
    assert secret not in page
    settings.LOCKKIT = {"URL": f"redis://127.0.0.1:{free_port()}/0?password={secret}"}
    page = operator.get(LIST).content.decode()
    assert "password=***" in page
    assert secret not in page


def test_a_missing_key_is_an_error_message(store: LockKit, operator: Client) -> None:
    response = operator.post(RELEASE, {}, follow=True)
    assert "Name the lock to release" in response.content.decode()


def test_the_list_shows_how_long_each_lock_has_been_held(store: LockKit, operator: Client) -> None:
    with store.lock("aged:1"):
        time.sleep(0.3)
        first = operator.get(LIST)
        [row] = first.context["rows"]
        assert row.age is not None and 0.25 <= row.age < 30
        assert '<th scope="col">Age</th>' in first.content.decode()
        assert f'<td class="lockkit-age">{row.held_for}</td>' in first.content.decode()
        time.sleep(0.3)
        [later] = operator.get(LIST).context["rows"]
        assert later.age is not None and later.age >= row.age + 0.25  # it grows while held
