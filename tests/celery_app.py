"""The Celery app the real workers in the test_celery_* tests run (``celery -A celery_app``).

Settings come from the environment the fixture sets: ``LOCKKIT_TEST_REDIS`` (a redis URL
without a database; broker on db 1, results on db 2, locks and recorded events on db 3) and
``LOCKKIT_TEST_UNLOCKED=1``, which turns every lock off (to see the tests fail without them),
``LOCKKIT_TEST_CLEAR_STALE=1``, which turns on ``lockkit_clear_stale_on_start``, and
``LOCKKIT_TEST_LOCK_URL``, another lock store (``django://default`` sets up the test Django
project, tests/djproject, whose settings then come from its ``DJPROJECT_*`` variables).
Each task records what it does in the Redis list ``events`` as JSON, with its pid and time.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import redis
from celery import Celery

from lockkit_celery import locked_task

BASE = os.environ.get("LOCKKIT_TEST_REDIS", "redis://127.0.0.1:6379")
LOCK_URL = os.environ.get("LOCKKIT_TEST_LOCK_URL", f"{BASE}/3")
if LOCK_URL.startswith("django://"):
    import django

    os.environ["DJANGO_SETTINGS_MODULE"] = "djproject.settings"
    django.setup()
VISIBILITY_TIMEOUT = 3.0

app = Celery("celery_app", broker=f"{BASE}/1", backend=f"{BASE}/2")
app.conf.update(
    lockkit_url=LOCK_URL,
    lockkit_namespace="celerytest",
    lockkit_enabled=os.environ.get("LOCKKIT_TEST_UNLOCKED") != "1",
    lockkit_clear_stale_on_start=os.environ.get("LOCKKIT_TEST_CLEAR_STALE") == "1",
    broker_transport_options={
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "unacked_restore_interval": 0.5,
        "unacked_restore_throttle": 1,
    },
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    result_expires=600,
    worker_hijack_root_logger=False,
)

_clients: dict[int, redis.Redis] = {}


def events() -> redis.Redis:
    """The Redis client for the ``events`` list (one per process)."""
    client = _clients.get(os.getpid())
    if client is None:
        client = _clients[os.getpid()] = redis.Redis.from_url(f"{BASE}/3")
    return client


def record(kind: str, task: str, **fields: Any) -> None:
    """Append one event: ``{"kind", "task", "pid", "at", ...}``."""
    event = {"kind": kind, "task": task, "pid": os.getpid(), "at": time.time(), **fields}
    events().rpush("events", json.dumps(event))


@locked_task(app=app, name="sms")
def sms(order_id: int, text: str = "paid", seconds: float = 1.5) -> int:
    """A slow SMS: a duplicate enqueued while it is queued or runs is answered with it."""
    record("start", "sms", order_id=order_id)
    time.sleep(seconds)
    # A storm test keeps this run going until its last caller is done (celery_support's
    # sms_held_open): a caller after the end is a new call, rightly answered with a new task.
    while events().exists(f"hold:sms:{order_id}"):
        time.sleep(0.02)
    record("end", "sms", order_id=order_id)
    return order_id


@locked_task(app=app, name="once_sms", unique_on=["order_id"], once=60)
def once_sms(order_id: int, note: str = "") -> int:
    """Sends at most once per order within a minute."""
    record("start", "once_sms", order_id=order_id)
    return order_id


@locked_task(app=app, name="boom", unique_on=["order_id"])
def boom(order_id: int) -> None:
    """Always fails."""
    record("start", "boom", order_id=order_id)
    raise ValueError(f"order {order_id} failed")


@locked_task(app=app, name="flaky", unique_on=["order_id"], bind=True)
def flaky(self: Any, order_id: int) -> int:
    """Retries twice with a countdown, then succeeds."""
    record("start", "flaky", order_id=order_id, retries=self.request.retries)
    if self.request.retries < 2:
        raise self.retry(countdown=0.5, max_retries=5)
    return order_id


@locked_task(
    app=app,
    name="killed",
    unique_on=["order_id"],
    ttl=3,
    acks_late=True,
    reject_on_worker_lost=True,
)
def killed(order_id: int) -> int:
    """Its first run SIGKILLs its own pool child mid-task; the requeued copy completes."""
    record("start", "killed", order_id=order_id)
    if events().set(f"killed:{order_id}", 1, nx=True):
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.3)
    record("end", "killed", order_id=order_id)
    return order_id


@locked_task(app=app, name="slow_acks_late", unique_on=["order_id"], acks_late=True, ttl=2)
def slow_acks_late(order_id: int, seconds: float = 7.0) -> int:
    """Runs past the broker's visibility timeout, so the broker hands it out again."""
    record("start", "slow_acks_late", order_id=order_id)
    time.sleep(seconds)
    record("end", "slow_acks_late", order_id=order_id)
    return order_id


#: The queue of ``whole_worker``, served only by the workers its tests start and kill.
WHOLE_WORKER_QUEUE = "whole_worker"
app.conf.task_routes = {"whole_worker": {"queue": WHOLE_WORKER_QUEUE}}


@locked_task(
    app=app, name="whole_worker", unique_on=["order_id"], ttl=30, acks_late=True
)  # fmt: skip
def whole_worker(order_id: int) -> int:
    """Its first run hangs until the test SIGKILLs the whole worker; the redelivered copy ends."""
    record("start", "whole_worker", order_id=order_id)
    if events().set(f"whole_worker:{order_id}", 1, nx=True):
        time.sleep(120)
    time.sleep(0.3)
    record("end", "whole_worker", order_id=order_id)
    return order_id


@app.task(name="collect")
def collect(values: list[int], tag: int) -> list[int]:
    """A chord body (a plain task): records that it fired, with what."""
    record("collect", "collect", order_id=tag, values=values)
    return values
