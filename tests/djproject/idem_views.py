"""Views of the Idempotency-Key tests: a charge that records every run of its body (the side
effect a retry must not repeat), and its unprotected twin."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Iterator

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.decorators import method_decorator
from django.views import View

from lockkit_django import idempotent

from .models import Charge


def _answer(request: HttpRequest, name: str, status: int = 201) -> JsonResponse:
    body = json.loads(request.body or b"{}")
    charge = uuid.uuid4().hex  # a second run of the body would answer another id
    response = JsonResponse(
        {"charge": charge, "name": name, "amount": body.get("amount"), "pid": os.getpid()},
        status=status,
    )
    response["X-Charge-Id"] = charge
    response.set_cookie("last_charge", charge, httponly=True)
    return response


def charge(request: HttpRequest, name: str) -> JsonResponse:
    """Charge once per call: ``?sleep=S`` makes the charge take S seconds."""
    time.sleep(float(request.GET.get("sleep", "0")))
    Charge.objects.create(name=name, pid=os.getpid())
    return _answer(request, name)


idem_charge = idempotent(charge)
required_charge = idempotent(required=True)(charge)
short_charge = idempotent(expires=1)(charge)


@idempotent
def declined(request: HttpRequest, name: str) -> JsonResponse:
    """An error response is kept and replayed like any other."""
    Charge.objects.create(name=name, pid=os.getpid())
    return _answer(request, name, status=402)


@idempotent
def stream(request: HttpRequest, name: str) -> StreamingHttpResponse:
    Charge.objects.create(name=name, pid=os.getpid())

    def chunks() -> Iterator[bytes]:
        yield b"streamed\n"

    return StreamingHttpResponse(chunks())


@idempotent
async def async_charge(request: HttpRequest, name: str) -> JsonResponse:
    await asyncio.sleep(float(request.GET.get("sleep", "0")))
    await Charge.objects.acreate(name=name, pid=os.getpid())
    return _answer(request, name)


@method_decorator(idempotent(methods=["POST", "PUT"]), name="dispatch")
class ChargeView(View):
    def put(self, request: HttpRequest, name: str) -> JsonResponse:
        return charge(request, name)


def runs(request: HttpRequest, name: str) -> JsonResponse:
    """How many times the charge of ``name`` ran, and in which processes."""
    pids = list(Charge.objects.filter(name=name).values_list("pid", flat=True))
    return JsonResponse({"runs": len(pids), "pids": sorted(set(pids))})


def whoami(request: HttpRequest) -> HttpResponse:
    return HttpResponse(str(getattr(request.user, "pk", None)))


AT_COMMIT: list[dict[str, bool]] = []


@idempotent
def atomic_charge(request: HttpRequest, name: str) -> JsonResponse:
    """Under ATOMIC_REQUESTS: records, at commit, whether the key's lock is held and whether
    the response is kept already (it must not be: the charge is not committed yet)."""
    from django.db import transaction

    from lockkit_django import get_kit

    def at_commit() -> None:
        locks = get_kit().admin.list("idempotency:")
        AT_COMMIT.append({"held": bool(locks)})

    transaction.on_commit(at_commit)
    response = charge(request, name)
    if request.GET.get("rollback"):
        transaction.set_rollback(True)
    return response


@idempotent
def upload(request: HttpRequest, name: str) -> JsonResponse:
    """A multipart form with a file: the view still reads every byte of it."""
    Charge.objects.create(name=name, pid=os.getpid())
    data = request.FILES["receipt"].read()
    return JsonResponse({"size": len(data), "note": request.POST["note"], "id": uuid.uuid4().hex})


def customer(request: HttpRequest) -> str | None:
    """SCOPE for anonymous callers of the tests: the X-Customer header."""
    return request.headers.get("X-Customer")
