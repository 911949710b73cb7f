"""Tasks of the test project for lockkit_django.tasks: each run appends a line to a file in
``$DJTASKS_DIR``, so the tests count how often a body ran, across worker processes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from lockkit_django.tasks import locked_task
from lockkit_django.tasks.compat import task


def _note(name: str, order_id: int) -> None:
    folder = Path(os.environ.get("DJTASKS_DIR", "."))
    with open(folder / f"{name}-{order_id}.log", "a") as file:
        file.write(f"{os.getpid()}\n")


@locked_task(unique_on=["order_id"], ttl=2)
def send_sms(order_id: int, text: str = "paid") -> int:
    _note("send_sms", order_id)
    time.sleep(0.2)
    return order_id


@task()
def send_sms_unlocked(order_id: int, text: str = "paid") -> int:
    _note("send_sms_unlocked", order_id)
    time.sleep(0.2)
    return order_id


@locked_task(unique_on=["order_id"], once=60, ttl=2)
def send_receipt(order_id: int) -> int:
    _note("send_receipt", order_id)
    return order_id * 10


@locked_task(ttl=1.5)
def export(order_id: int) -> int:
    """Runs while ``hold-<order_id>`` exists in ``$DJTASKS_DIR`` (the test kills it there)."""
    _note("export-start", order_id)
    hold = Path(os.environ.get("DJTASKS_DIR", ".")) / f"hold-{order_id}"
    while hold.exists():
        time.sleep(0.05)
    _note("export", order_id)
    return order_id
