"""The app a real worker runs for ``benchmarks.celery_overhead --worker``.

``BENCH_REDIS`` (a redis URL without a database): broker on db 1, locks of every contender
on db 3. Each task counts itself in ``done:<contender>`` on db 3.
"""

from __future__ import annotations

import os
from typing import Any

import redis
from celery import Celery

from lockkit_celery import locked_task

BASE = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379")

app = Celery("celery_worker_app", broker=f"{BASE}/1")
app.conf.update(
    lockkit_url=f"{BASE}/3",
    lockkit_namespace="bench",
    ONCE={"backend": "celery_once.backends.Redis", "settings": {"url": f"{BASE}/3"}},
    singleton_backend_url=f"{BASE}/3",
    task_ignore_result=True,
    worker_prefetch_multiplier=16,
    broker_connection_retry_on_startup=True,
)

_counter: dict[int, redis.Redis] = {}


def _count(name: str) -> None:
    client = _counter.get(os.getpid())
    if client is None:
        client = _counter[os.getpid()] = redis.Redis.from_url(f"{BASE}/3")
    client.incr(f"done:{name}")


@app.task(name="bench.plain")
def plain(n: int) -> None:
    _count("plain")


@locked_task(app=app, name="bench.lockkit")
def locked(n: int) -> None:
    _count("lockkit")


TASKS: dict[str, Any] = {"plain task": plain, "lockkit LockedTask": locked}

try:
    from celery_once import QueueOnce

    @app.task(name="bench.once", base=QueueOnce)
    def once(n: int) -> None:
        _count("once")

    TASKS["celery-once QueueOnce"] = once
except ImportError:
    pass

try:
    from celery_singleton import Singleton

    @app.task(name="bench.singleton", base=Singleton)
    def singleton(n: int) -> None:
        _count("singleton")

    TASKS["celery-singleton Singleton"] = singleton
except ImportError:
    pass
