"""A Celery app that uses no lockkit at all, for the test that lockkit leaves its worker
alone (``LOCKKIT_TEST_REDIS``: a redis URL without a database; broker on db 4)."""

from __future__ import annotations

import os

from celery import Celery

BASE = os.environ.get("LOCKKIT_TEST_REDIS", "redis://127.0.0.1:6379")

app = Celery("celery_plain_app", broker=f"{BASE}/4")
app.conf.update(broker_connection_retry_on_startup=True, worker_hijack_root_logger=False)


@app.task(name="plain_add")
def plain_add(a: int, b: int) -> int:
    return a + b
