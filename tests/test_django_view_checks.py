"""The system checks that walk the URLs: each locked view's rule (``@lock_view``,
``method_decorator``, ``LockViewMixin``) and each middleware rule, checked against the store
and the URL pattern serving it, so ``manage.py check`` finds what would be a 500."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.test import override_settings
from django.urls import path
from djchecks import run_checks

from lockkit_django import lock_view

# Building a kit makes no connection: no server is needed to check a rule against it.
REDIS = "redis://127.0.0.1:6379/0"


@contextmanager
def urlconf(*patterns: Any, **lockkit: Any) -> Iterator[None]:
    urls = types.ModuleType(f"lockkit_check_urls_{id(patterns)}")
    urls.urlpatterns = list(patterns)  # type: ignore[attr-defined]
    sys.modules[urls.__name__] = urls
    try:
        with override_settings(ROOT_URLCONF=urls.__name__, LOCKKIT=lockkit):
            yield
    finally:
        del sys.modules[urls.__name__]


def _ids(prefix: str) -> list[str]:
    return [m.msg for m in run_checks() if m.id.startswith(prefix)]


@lock_view("export", ttl=None)
def export(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


NO_LEASE_RULE = {"PATH": r"^/mw/$", "KEY": "mw", "TTL": None}


def test_ttl_none_on_a_store_that_needs_a_lease_fails_the_checks() -> None:
    with urlconf(path("export/", export), URL=REDIS, MIDDLEWARE={"RULES": [NO_LEASE_RULE]}):
        found = _ids("lockkit.E006")
    assert len(found) == 2, found
    assert any("export" in m and "ttl=None" in m for m in found)
    assert any("MIDDLEWARE" in m and "ttl=None" in m for m in found)


def test_ttl_none_on_a_store_without_leases_passes_the_checks() -> None:
    with urlconf(path("export/", export), URL="memory://checks"):
        assert _ids("lockkit.E006") == []


def test_a_key_typo_on_a_decorated_dispatch_or_as_view_fails_the_checks() -> None:
    from django.utils.decorators import method_decorator
    from django.views import View

    @method_decorator(lock_view("item:{pkk}"), name="dispatch")
    class Item(View):
        def get(self, request: HttpRequest, pk: str) -> HttpResponse:
            return HttpResponse("ok")

    class Plain(View):
        def get(self, request: HttpRequest, pk: str) -> HttpResponse:
            return HttpResponse("ok")

    wrapped = lock_view("plain:{pkk}")(Plain.as_view())  # as_view() takes **kwargs
    fine = lock_view("plain:{pk}")(Plain.as_view())
    with urlconf(
        path("item/<pk>/", Item.as_view()),
        path("plain/<pk>/", wrapped),
        path("fine/<pk>/", fine),
        path("extra/", fine, {"pk": "all"}),  # a URL argument from path(..., kwargs)
        URL="memory://checks",
    ):
        found = _ids("lockkit.E005")
    assert len(found) == 2, found
    assert all("pkk" in m for m in found)
    assert any("Item.dispatch" in m for m in found)
