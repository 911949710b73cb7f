"""Views of the test project: the same pay logic unlocked, under @lock_view, under the
middleware; and small views that show each behaviour of a locked view."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator

from django.db import transaction
from django.db.models import F
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from lockkit_django import LockViewMixin, get_kit, lock_view

from .models import Order, Product

# Long enough that two unlocked duplicate clicks overlap.
WORK_SECONDS = 0.02


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@csrf_exempt
def pay(request: HttpRequest, order_id: int) -> JsonResponse:
    """Pay once: a second click must find the order paid. Check, work, then write."""
    order = Order.objects.get(pk=order_id)
    if order.payments:
        return JsonResponse({"paid": False, "pid": os.getpid()})
    product = Product.objects.get(pk=order.product_id)
    if product.stock <= 0:
        return JsonResponse({"paid": False, "sold_out": True, "pid": os.getpid()})
    time.sleep(WORK_SECONDS)  # the card is charged here
    Product.objects.filter(pk=product.pk).update(stock=F("stock") - 1)
    Order.objects.filter(pk=order_id).update(payments=F("payments") + 1)
    return JsonResponse({"paid": True, "pid": os.getpid()})


locked_pay = csrf_exempt(lock_view("order:{order_id}")(pay))


@csrf_exempt
@lock_view("held:{name}")
def held(request: HttpRequest, name: str) -> JsonResponse:
    """Reports whether its own lock is held while it runs (it must be)."""
    info = get_kit().admin.info(f"held:{name}")
    token = request.lockkit_lock.token  # type: ignore[attr-defined]
    return JsonResponse({"held": info is not None, "token": token, "info": info and info.token})


@csrf_exempt
@lock_view("boom:{name}")
def boom(request: HttpRequest, name: str) -> HttpResponse:
    raise RuntimeError("the view failed")


@lock_view("stream:{name}")
def stream(request: HttpRequest, name: str) -> StreamingHttpResponse:
    def chunks() -> Iterator[bytes]:
        for i in range(3):
            info = get_kit().admin.info(f"stream:{name}")
            yield json.dumps({"chunk": i, "held": info is not None}).encode() + b"\n"

    return StreamingHttpResponse(chunks())


@csrf_exempt
@lock_view("atomic:{name}")
def atomic_write(request: HttpRequest, name: str) -> JsonResponse:
    """Under ATOMIC_REQUESTS: records, at commit time, whether the lock is still held."""
    seen: dict[str, bool] = {}

    def at_commit() -> None:
        seen["held_at_commit"] = get_kit().admin.info(f"atomic:{name}") is not None
        COMMITS.append(seen["held_at_commit"])

    transaction.on_commit(at_commit)
    product = Product.objects.create(name=name, stock=1)
    return JsonResponse({"product": product.pk, "in_atomic": not transaction.get_autocommit()})


COMMITS: list[bool] = []


@csrf_exempt
@lock_view("rollback:{name}", ttl=60)
def rolled_back(request: HttpRequest, name: str) -> JsonResponse:
    """Under ATOMIC_REQUESTS: marks the request's transaction for rollback (as DRF's
    exception handler does) and answers 400."""
    transaction.set_rollback(True)
    return JsonResponse({"rolled_back": True}, status=400)


@csrf_exempt
@lock_view("src:{user}:{session[cart]}:{headers[X-Tenant]}:{query[q]}:{form[f]}")
def sources(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"keys": [i.key for i in get_kit().admin.list("src:")]})


def _key_of(request: HttpRequest, **kwargs: object) -> str:
    return f"func:{request.GET['who']}"


@lock_view(_key_of, methods=["POST"])
def by_function(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"keys": [i.key for i in get_kit().admin.list("func:")]})


@lock_view("slow:{name}", wait=5)
async def async_view(request: HttpRequest, name: str) -> JsonResponse:
    info = await asyncio.to_thread(get_kit().admin.info, f"slow:{name}")
    return JsonResponse({"held": info is not None})


@csrf_exempt
@lock_view("maybe:{name}", methods=["POST"])
def maybe_locked(request: HttpRequest, name: str) -> JsonResponse:
    """Reads request.lockkit_lock whether or not this request locked."""
    return JsonResponse({"locked": request.lockkit_lock is not None})  # type: ignore[attr-defined]


# No csrf_exempt (the project runs no CsrfViewMiddleware): Django 4.2's wraps any view in a
# sync function, which turns an async view into one that answers an unawaited coroutine.
@lock_view("auser:{user}:{session[cart]}")
async def async_user(request: HttpRequest) -> JsonResponse:
    """An async view whose key reads the user and the session (database queries)."""
    return JsonResponse({"key": request.lockkit_lock.key})  # type: ignore[attr-defined]


@method_decorator(csrf_exempt, name="dispatch")
@method_decorator(lock_view("cbv:{name}", methods=["POST"]), name="dispatch")
class DecoratedView(View):
    def get(self, request: HttpRequest, name: str) -> JsonResponse:
        return JsonResponse({"held": get_kit().admin.info(f"cbv:{name}") is not None})

    def post(self, request: HttpRequest, name: str) -> JsonResponse:
        return JsonResponse({"held": get_kit().admin.info(f"cbv:{name}") is not None})


@method_decorator(csrf_exempt, name="dispatch")
class MixinView(LockViewMixin, View):
    lock_key = "mixin:{name}"

    def post(self, request: HttpRequest, name: str) -> JsonResponse:
        return JsonResponse({"held": get_kit().admin.info(f"mixin:{name}") is not None})


@method_decorator(csrf_exempt, name="dispatch")
class AsyncMixinView(LockViewMixin, View):
    lock_key = "amixin:{name}"

    async def post(self, request: HttpRequest, name: str) -> JsonResponse:
        info = await asyncio.to_thread(get_kit().admin.info, f"amixin:{name}")
        return JsonResponse({"held": info is not None})


def plain(request: HttpRequest, name: str) -> JsonResponse:
    """No decorator: what the middleware's rule named ``plain:{name}`` does to it."""
    return JsonResponse({"held": get_kit().admin.info(f"plain:{name}") is not None})


def plain_boom(request: HttpRequest, name: str) -> HttpResponse:
    raise RuntimeError("the view failed")


def plain_stream(request: HttpRequest, name: str) -> StreamingHttpResponse:
    def chunks() -> Iterator[bytes]:
        for _ in range(2):
            yield b"held\n" if get_kit().admin.info(f"plain:{name}") else b"free\n"

    return StreamingHttpResponse(chunks())


async def plain_async(request: HttpRequest, name: str) -> JsonResponse:
    info = await asyncio.to_thread(get_kit().admin.info, f"plain:{name}")
    return JsonResponse({"held": info is not None})


def key_from_header(request: HttpRequest, **url_kwargs: object) -> str:
    return f"plain:{request.headers['X-Name']}"


def teapot(request: HttpRequest, exc: Exception) -> HttpResponse:
    return HttpResponse(f"busy: {exc}", status=418)


@csrf_exempt
def shop_reset(request: HttpRequest) -> JsonResponse:
    """A fresh shop: ``n`` orders, each of its own product with one unit in stock."""
    Order.objects.all().delete()
    Product.objects.all().delete()
    ids = []
    for i in range(int(request.GET["n"])):
        product = Product.objects.create(name=f"p{i}", stock=1)
        ids.append(Order.objects.create(product=product).pk)
    return JsonResponse({"orders": ids})


def shop_state(request: HttpRequest) -> JsonResponse:
    orders = Order.objects.select_related("product").order_by("pk")
    return JsonResponse(
        {"orders": [{"payments": o.payments, "stock": o.product.stock} for o in orders]}
    )


@csrf_exempt
def plain_atomic(request: HttpRequest, name: str) -> JsonResponse:
    """Under ATOMIC_REQUESTS: records whether the middleware's lock is held at commit."""
    transaction.on_commit(lambda: COMMITS.append(get_kit().admin.info(f"plain:{name}") is not None))
    Product.objects.create(name=name, stock=1)
    return JsonResponse({"in_atomic": not transaction.get_autocommit()})
