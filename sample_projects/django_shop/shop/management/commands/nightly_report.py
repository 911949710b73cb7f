"""``manage.py nightly_report``: a slow cron job; run it as ``lockkit run -- nightly_report``
so overlapping runs never run it twice at once."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand

from shop.models import Order


class Command(BaseCommand):
    help = "Count the paid orders (slowly)."

    def handle(self, *args: Any, **options: Any) -> None:
        time.sleep(2)
        self.stdout.write(f"{Order.objects.filter(payments__gt=0).count()} paid orders")
