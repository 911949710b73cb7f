"""@lock_view and LockViewMixin through Django's test clients, on the memory store."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pytest
from django.db import connections
from django.test import Client, TestCase, override_settings
from djproject import views
from djproject.models import Order, Product

from lockkit_core.testing.servers import free_port
from lockkit_django import PROBLEM_JSON, get_kit


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


def test_the_view_runs_under_its_lock_and_releases_it(client: Client) -> None:
    answer = client.post("/held/a/").json()
    assert answer["held"] is True
    assert isinstance(answer["token"], int)  # request.lockkit_lock, for fenced writes
    assert answer["token"] == answer["info"]
    assert get_kit().admin.info("held:a") is None


def test_a_busy_lock_answers_409_problem_json_with_retry_after(client: Client) -> None:
    with get_kit().lock("held:b"):
        response = client.post("/held/b/")
    assert response.status_code == 409
    assert response["Content-Type"] == PROBLEM_JSON
    assert response["Retry-After"] == "1"
    problem = json.loads(response.content)
    assert problem["status"] == 409
    assert problem["lock"] == "held:b"
    assert "held:b" in problem["detail"]
    assert client.post("/held/b/").status_code == 200


def test_retry_after_follows_the_setting(client: Client) -> None:
    # get_kit() is called once the override is in force.
    with (
        override_settings(LOCKKIT={"URL": "memory://r", "RETRY_AFTER": 7}),
        get_kit().lock("held:c"),
    ):
        response = client.post("/held/c/")
    assert response["Retry-After"] == "7"


@pytest.mark.django_db
def test_a_waiting_request_gets_the_lock_when_it_is_released(client: Client) -> None:
    product = Product.objects.create(name="p", stock=1)
    order = Order.objects.create(product=product)
    with override_settings(LOCKKIT={"URL": "memory://wait", "WAIT": 5}):
        lock = get_kit().lock(f"order:{order.pk}", reentrant=False)
        lock.acquire()
        threading.Timer(0.3, lock.release).start()
        started = time.monotonic()
        response = client.post(f"/orders/{order.pk}/pay/")
    assert response.json()["paid"] is True
    assert time.monotonic() - started >= 0.25
    # WAIT defaults to 0: busy at once
    with get_kit().lock(f"order:{order.pk}"):
        assert client.post(f"/orders/{order.pk}/pay/").status_code == 409


def test_an_exception_releases_the_lock(client: Client) -> None:
    assert client.post("/boom/x/").status_code == 500
    assert get_kit().admin.info("boom:x") is None


@pytest.mark.django_db
def test_a_stream_holds_the_lock_until_it_is_closed(client: Client) -> None:
    response = client.get("/stream/s/")
    assert get_kit().admin.info("stream:s") is not None  # the view returned; bytes to come
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert [line["held"] for line in lines] == [True, True, True]
    response.close()
    assert get_kit().admin.info("stream:s") is None


@pytest.mark.django_db(transaction=True)
def test_under_atomic_requests_the_lock_is_released_after_the_commit(client: Client) -> None:
    views.COMMITS.clear()
    # ATOMIC_REQUESTS is read per request from the connection's settings.
    connections["default"].settings_dict["ATOMIC_REQUESTS"] = True
    try:
        response = client.post("/atomic/a/")
    finally:
        connections["default"].settings_dict["ATOMIC_REQUESTS"] = False
    assert response.status_code == 200
    assert response.json()["in_atomic"] is True  # the view ran inside the request transaction
    assert views.COMMITS == [True]  # the lock was still held when the data was committed
    assert get_kit().admin.info("atomic:a") is None


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_request_releases_its_lock(client: Client) -> None:
    # Django drops on_commit callbacks on a rollback: the lock must not wait for a commit.
    connections["default"].settings_dict["ATOMIC_REQUESTS"] = True
    try:
        first = client.post("/rollback/a/")
        second = client.post("/rollback/a/")
    finally:
        connections["default"].settings_dict["ATOMIC_REQUESTS"] = False
    assert (first.status_code, second.status_code) == (400, 400)
    assert get_kit().admin.info("rollback:a") is None  # not left to its 60 s lease


@pytest.mark.django_db  # the test runs in a transaction that never commits, as in TestCase
def test_inside_a_test_transaction_every_request_releases_its_lock(client: Client) -> None:
    assert [client.post("/held/tc/").status_code for _ in range(2)] == [200, 200]
    assert get_kit().admin.info("held:tc") is None


class TestCaseRequests(TestCase):
    """A plain django.test.TestCase, as a project's own tests use."""

    def test_two_posts_to_one_locked_view_both_run(self) -> None:
        assert self.client.post("/held/dtc/").status_code == 200
        assert self.client.post("/held/dtc/").status_code == 200


def test_request_lockkit_lock_is_none_when_the_request_does_not_lock(client: Client) -> None:
    assert client.post("/maybe/a/").json() == {"locked": True}
    assert client.get("/maybe/a/").json() == {"locked": False}  # methods=["POST"]
    with override_settings(LOCKKIT={"URL": "memory://off", "ENABLED": False}):
        assert client.post("/maybe/a/").json() == {"locked": False}


@pytest.mark.django_db
def test_keys_from_user_session_header_query_and_form(client: Client) -> None:
    from django.contrib.auth.models import User

    user = User.objects.create_user("ann", password="pw")
    client.force_login(user)
    session = client.session
    session["cart"] = "c9"
    session.save()
    response = client.post("/sources/?q=shoes", {"f": "red"}, headers={"X-Tenant": "acme"})
    assert response.json() == {"keys": [f"src:{user.pk}:c9:acme:shoes:red"]}


@pytest.mark.django_db
def test_a_value_the_client_did_not_send_is_a_400(client: Client) -> None:
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_user("bob"))
    session = client.session
    session["cart"] = "c1"
    session.save()
    response = client.post("/sources/?q=shoes", {"f": "red"})  # no X-Tenant header
    assert response.status_code == 400
    assert response["Content-Type"] == PROBLEM_JSON
    assert "X-Tenant" in json.loads(response.content)["detail"]


def test_an_anonymous_user_key_is_a_400(client: Client) -> None:
    response = client.post("/sources/?q=s", {"f": "r"}, headers={"X-Tenant": "t"})
    assert response.status_code == 400
    assert "signed-in user" in json.loads(response.content)["detail"]


def test_a_key_function_and_methods(client: Client) -> None:
    assert client.post("/by-function/?who=zoe").json() == {"keys": ["func:zoe"]}
    with get_kit().lock("func:zoe"):
        assert client.post("/by-function/?who=zoe").status_code == 409
        assert client.get("/by-function/?who=zoe").status_code == 200  # GET does not lock


def test_store_down_is_503_unless_the_rule_fails_open(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    dead = {"URL": f"redis://127.0.0.1:{free_port()}/0", "OPTIONS": {"socket_timeout": 0.5}}
    with override_settings(LOCKKIT=dead), caplog.at_level(logging.WARNING, "lockkit.django"):
        response = client.post("/held/down/")
        assert response.status_code == 503
        assert response["Retry-After"] == "1"
        assert response["Content-Type"] == PROBLEM_JSON
        assert any("503" in r.getMessage() for r in caplog.records)

        from lockkit_django import lock_view

        def view(request: object) -> object:
            from django.http import HttpResponse

            return HttpResponse("ran")

        from django.test import RequestFactory

        request = RequestFactory().post("/x/")
        opened = lock_view("open", fail_open=True)(view)(request)
        assert opened.status_code == 200
        assert any("WITHOUT its lock" in r.getMessage() for r in caplog.records)


def test_class_based_views_with_method_decorator_and_mixin(client: Client) -> None:
    assert client.post("/cbv/a/").json() == {"held": True}
    assert client.get("/cbv/a/").json() == {"held": False}  # methods=["POST"]
    assert client.post("/mixin/a/").json() == {"held": True}
    with get_kit().lock("mixin:a"), get_kit().lock("cbv:a"):
        assert client.post("/mixin/a/").status_code == 409
        assert client.post("/cbv/a/").status_code == 409
    assert get_kit().admin.info("mixin:a") is None


def test_a_mixin_without_a_key_is_a_config_error() -> None:
    from django.views import View

    from lockkit_core import ConfigError
    from lockkit_django import LockViewMixin

    class Keyless(LockViewMixin, View):
        pass

    with pytest.raises(ConfigError, match="sets no lock_key"):
        Keyless.lock_rule()


def test_a_key_template_typo_is_a_config_error_when_the_view_is_decorated() -> None:
    from lockkit_core import ConfigError
    from lockkit_django import lock_view

    def pay(request: object, order_id: int) -> object:
        return None

    with pytest.raises(ConfigError, match=r"names ordr_id, which is neither a view argument"):
        lock_view("order:{ordr_id}")(pay)
    lock_view("order:{order_id}:{user}")(pay)  # the right name and a source both pass


def test_lock_view_mixin_answers_a_busy_lock_with_its_on_busy() -> None:
    from django.http import HttpRequest, HttpResponse
    from django.test import RequestFactory
    from django.views import View

    from lockkit_django import LockViewMixin, RequestLocked

    def queued(request: HttpRequest, exc: RequestLocked) -> HttpResponse:
        return HttpResponse(f"queued behind {exc.key}", status=202)

    class Refund(LockViewMixin, View):
        lock_key = "refund:{order_id}"
        lock_on_busy = staticmethod(queued)

        def post(self, request: HttpRequest, order_id: int) -> HttpResponse:
            return HttpResponse("refunded")

    request = RequestFactory().post("/refund/5/")
    with get_kit().lock("refund:5"):
        response = Refund.as_view()(request, order_id=5)
    assert (response.status_code, response.content) == (202, b"queued behind refund:5")


@pytest.mark.django_db  # response.close() sends request_finished, which closes connections
def test_a_lost_lock_keeps_the_response_and_is_signalled() -> None:
    from django.http import HttpRequest, HttpResponse
    from django.test import RequestFactory

    from lockkit_django import lock_lost, lock_view
    from lockkit_django.conf import lockkit_state

    told: list[str] = []

    def on_lost(sender: object, lock: object, **_: object) -> None:
        told.append(getattr(lock, "key", ""))

    @lock_view("refund:9")
    def refund(request: HttpRequest) -> HttpResponse:
        get_kit().admin.force_release("refund:9")  # an operator frees the key meanwhile
        return HttpResponse("refunded")

    lock_lost.connect(on_lost)
    try:
        before = lockkit_state().counts["lost"]
        response = refund(RequestFactory().post("/refund/9/"))
        response.close()  # as Django's handler does: the lock ends with the response
    finally:
        lock_lost.disconnect(on_lost)
    assert (response.status_code, response.content) == (200, b"refunded")
    assert lockkit_state().counts["lost"] == before + 1
    assert told == ["refund:9"]


def test_a_mixin_key_naming_what_its_url_does_not_capture_fails_the_checks() -> None:
    import sys
    import types

    from django.http import HttpRequest, HttpResponse
    from django.urls import path
    from django.views import View
    from djchecks import run_checks

    from lockkit_django import LockViewMixin

    class Refund(LockViewMixin, View):
        lock_key = "refund:{ordr_id}"

        def post(self, request: HttpRequest, order_id: int) -> HttpResponse:
            return HttpResponse("refunded")

    class Fine(LockViewMixin, View):
        lock_key = "refund:{order_id}"

    urls = types.ModuleType("lockkit_typo_urls")
    urls.urlpatterns = [  # type: ignore[attr-defined]
        path("refund/<int:order_id>/", Refund.as_view()),
        path("fine/<int:order_id>/", Fine.as_view()),
    ]
    sys.modules[urls.__name__] = urls
    try:
        with override_settings(ROOT_URLCONF=urls.__name__):
            found = [m for m in run_checks() if m.id == "lockkit.E005"]
    finally:
        del sys.modules[urls.__name__]
    assert len(found) == 1, found
    assert "Refund" in found[0].msg
    assert "ordr_id" in found[0].msg


class ReplaceStreams:
    """A middleware that answers in place of a streamed response (and never closes it)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        response = self.get_response(request)
        if getattr(response, "streaming", False):
            from django.http import HttpResponse

            return HttpResponse("replaced")
        return response


@pytest.mark.django_db
def test_a_stream_a_middleware_replaces_releases_its_lock(client: Client) -> None:
    from django.conf import settings

    with override_settings(MIDDLEWARE=[*settings.MIDDLEWARE, f"{__name__}.ReplaceStreams"]):
        response = client.get("/stream/r/")
    assert response.content == b"replaced"
    assert get_kit().admin.info("stream:r") is None


def test_a_mixin_after_view_in_the_bases_is_a_config_error() -> None:
    from django.views import View

    from lockkit_core import ConfigError
    from lockkit_django import LockViewMixin

    with pytest.raises(ConfigError, match=r"Wrong.*LockViewMixin, View"):

        class Wrong(View, LockViewMixin):  # View.dispatch first: the mixin would never run
            lock_key = "wrong"

    class Logged:
        def dispatch(self, *args: Any, **kwargs: Any) -> Any:
            return super().dispatch(*args, **kwargs)  # type: ignore[misc]

    class Fine(Logged, LockViewMixin, View):  # a mixin calling super() before it is fine
        lock_key = "fine"

    class Overridden(Fine):
        def dispatch(self, *args: Any, **kwargs: Any) -> Any:
            return super().dispatch(*args, **kwargs)

    assert Overridden.lock_rule().key.template == "fine"
