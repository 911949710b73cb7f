"""``manage.py seed --orders N --stock S``: a fresh shop."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from shop.models import Order, Product


class Command(BaseCommand):
    help = "Empty the shop, then add products and unpaid orders."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--orders", type=int, default=20)
        parser.add_argument("--stock", type=int, default=10)

    def handle(self, *args: Any, **options: Any) -> None:
        Order.objects.all().delete()
        Product.objects.all().delete()
        for i in range(options["orders"]):  # one product of stock 1 per order
            Order.objects.create(product=Product.objects.create(name=f"item {i}", stock=1))
        Product.objects.create(name="last units", stock=options["stock"])
