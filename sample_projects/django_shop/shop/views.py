"""The shop's endpoints.

* ``POST /orders/<id>/pay/``: locked by ``LockMiddleware`` (the rule in settings.LOCKKIT);
  with an ``Idempotency-Key`` header, ``IdempotencyMiddleware`` answers a retry with the first
  response instead of running it again.
* ``POST /unlocked/orders/<id>/pay/``: the same view, unlocked, to show the race.
* ``POST /products/<id>/buy/``: ``@lock_view`` on the product, and the stock written with
  ``fenced_update`` so a holder whose lease ran out cannot write over a newer one.
"""

from __future__ import annotations

import os
import time

from django.db.models import F
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from lockkit_django import fenced_update, lock_view

from .models import Order, Product

CHARGE_SECONDS = float(os.environ.get("SHOP_CHARGE_SECONDS", "0.02"))


def customer(request: HttpRequest) -> str | None:
    """Who is paying, for ``LOCKKIT['IDEMPOTENCY']['SCOPE']``: the shop has no logins."""
    return request.headers.get("X-Customer")


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@csrf_exempt
@require_POST
def pay(request: HttpRequest, order_id: int) -> JsonResponse:
    """Charge the card once: a second click finds the order paid."""
    order = Order.objects.select_related("product").get(pk=order_id)
    if order.payments:
        return JsonResponse({"paid": False, "reason": "already paid"})
    if order.product.stock <= 0:
        return JsonResponse({"paid": False, "reason": "sold out"})
    time.sleep(CHARGE_SECONDS)  # the payment provider
    Product.objects.filter(pk=order.product_id).update(stock=F("stock") - 1)
    Order.objects.filter(pk=order_id).update(payments=F("payments") + 1)
    return JsonResponse({"paid": True, "pid": os.getpid()})


@csrf_exempt
@require_POST
@lock_view("product:{product_id}", wait=5)
def buy(request: HttpRequest, product_id: int) -> JsonResponse:
    """Take one unit of stock and create a paid order."""
    product = Product.objects.get(pk=product_id)
    if product.stock <= 0:
        return JsonResponse({"bought": False, "reason": "sold out"}, status=410)
    time.sleep(CHARGE_SECONDS)
    token = request.lockkit_lock.token  # type: ignore[attr-defined]
    row = Product.objects.filter(pk=product_id)
    if not fenced_update(row, token, stock=product.stock - 1):
        return JsonResponse({"bought": False, "reason": "lost the lock"}, status=409)
    order = Order.objects.create(product=product, payments=1)
    return JsonResponse({"bought": True, "order": order.pk}, status=201)


def state(request: HttpRequest) -> JsonResponse:
    products = {p.pk: p.stock for p in Product.objects.all()}
    orders = list(Order.objects.values("pk", "product_id", "payments").order_by("pk"))
    return JsonResponse({"stock": products, "orders": orders})
