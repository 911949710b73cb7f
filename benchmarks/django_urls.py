"""Routes of the benchmark's Django project: one trivial view under two paths."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path


def number(request: HttpRequest, n: int) -> HttpResponse:
    """Answer with the number from the path: as little work as a view can do."""
    return HttpResponse(str(n), content_type="text/plain")


def health(request: HttpRequest) -> HttpResponse:
    """Readiness probe for the server start-up."""
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("plain/<int:n>", number),
    path("locked/<int:n>", number),
    path("health", health),
]
