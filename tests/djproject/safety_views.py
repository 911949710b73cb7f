"""Views of the request-input safety tests: keys built from the session, a query value and a
form value, and a stream read slowly."""

from __future__ import annotations

import json
from collections.abc import Iterator

from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from lockkit_django import get_kit, lock_view


@csrf_exempt
@lock_view("cart:{session}")
def cart(request: HttpRequest) -> JsonResponse:
    """Locked per session: answers the keys held while it runs."""
    return JsonResponse({"keys": [i.key for i in get_kit().admin.list("cart:")]})


@csrf_exempt
@lock_view("search:{query[q]}:{form[f]}")
def search(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"keys": [i.key for i in get_kit().admin.list("search:")]})


@lock_view("export:{name}")
def export(request: HttpRequest, name: str) -> StreamingHttpResponse:
    """``?rows=N&pad=B``: N rows (3), each padded with B bytes (0), so that a client that
    stops reading fills the socket buffers and holds the server's write."""
    count, pad = int(request.GET.get("rows", "3")), int(request.GET.get("pad", "0"))

    def rows() -> Iterator[bytes]:
        for i in range(count):
            yield json.dumps({"row": i}).encode() + b" " * pad + b"\n"

    return StreamingHttpResponse(rows())
