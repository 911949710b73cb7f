"""Routes of the benchmark's Django project: one trivial view under two paths, and the same
view locking by hand with bare redis-py (the floor, once ``FLOOR`` is set)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from .redis_floor import Floor

#: Set by the in-process benchmark to lock ``/floor/<n>`` by hand (see .redis_floor).
FLOOR: Floor | None = None


def number(request: HttpRequest, n: int) -> HttpResponse:
    """Answer with the number from the path: as little work as a view can do."""
    return HttpResponse(str(n), content_type="text/plain")


def by_hand(request: HttpRequest, n: int) -> HttpResponse:
    """:func:`number`, locking ``n`` by hand with SET NX PX + compare-and-delete."""
    assert FLOOR is not None, "benchmarks.django_urls.FLOOR is not set"
    FLOOR.cycle(f"floor:view:{n}")
    return HttpResponse(str(n), content_type="text/plain")


def health(request: HttpRequest) -> HttpResponse:
    """Readiness probe for the server start-up."""
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("plain/<int:n>", number),
    path("locked/<int:n>", number),
    path("floor/<int:n>", by_hand),
    path("health", health),
]
