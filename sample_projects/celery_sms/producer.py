"""One web process of the story: enqueues every order's payment SMS at a given moment."""

from __future__ import annotations

import time
from typing import Any

#: order id -> extra arguments: order 3 crashes its first run, order 4 outlasts the
#: broker's visibility timeout.
ORDERS: dict[int, dict[str, Any]] = {1: {}, 2: {}, 3: {"crash": True}, 4: {"slow": 6.0}, 5: {}}


def produce(start_at: float, who: str) -> None:
    """Enqueue every order's confirmation at ``start_at``; print the task ids it got."""
    from sample_projects.celery_sms.tasks import send_payment_sms

    time.sleep(max(0.0, start_at - time.time()))
    for order_id, extra in ORDERS.items():
        result = send_payment_sms.delay(order_id, f"+3360000000{order_id}", **extra)
        print(f"  {who}: order {order_id} -> task {result.id}", flush=True)
