"""``delay_on_commit`` of a locked task in Django (the test project, tests/djproject).

The task publishes to its own broker database on the real Redis, so the test counts the
messages there: a committed call publishes once, duplicates in the transaction (or after it)
are answered with the queued task, and a rolled-back call publishes nothing and takes no lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from celery.signals import after_task_publish

from lockkit_celery import kit_for, locked_task
from lockkit_core.testing import RedisServer

# pytest-django runs every test here in a real transaction on the test project's database
# (tests/djproject), so on_commit callbacks fire when the block commits.
pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

django = pytest.importorskip("django")


@pytest.fixture
def orders_table(transactional_db: None) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS paid_order (id INTEGER PRIMARY KEY)")


@pytest.fixture(scope="module")
def broker(redis_server: RedisServer) -> Iterator[redis.Redis]:
    base = redis_server.url.rsplit("/", 1)[0]
    client = redis.Redis.from_url(f"{base}/5")
    client.flushdb()
    yield client
    client.close()


@pytest.fixture(scope="module")
def sms(redis_server: RedisServer, broker: redis.Redis) -> Any:
    base = redis_server.url.rsplit("/", 1)[0]
    app = Celery("django_shop", broker=f"{base}/5")
    app.conf.update(lockkit_url=f"{base}/3", lockkit_namespace="celery-django")

    @locked_task(app=app, name="paid_sms", unique_on=["order_id"])
    def paid_sms(order_id: int, text: str = "paid") -> int:
        return order_id

    return paid_sms


@pytest.fixture
def published() -> Iterator[list[str]]:
    ids: list[str] = []

    def on_publish(sender: Any = None, headers: Any = None, **_: Any) -> None:
        if sender == "paid_sms":
            ids.append(headers["id"])

    after_task_publish.connect(on_publish, weak=False)
    yield ids
    after_task_publish.disconnect(on_publish)


def _save_order(order_id: int) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO paid_order (id) VALUES (%s)", [order_id])


def test_delay_on_commit_publishes_once_after_commit_and_deduplicates(
    sms: Any, broker: redis.Redis, published: list[str], orders_table: None
) -> None:
    from django.db import transaction

    before = broker.llen("celery")
    with transaction.atomic():
        _save_order(1)
        sms.delay_on_commit(1)
        sms.delay_on_commit(order_id=1, text="paid")  # the same call, another style
        assert published == []
        assert broker.llen("celery") == before
        assert kit_for(sms.app).admin.info(sms.lockkit_key_for((1,), {})) is None
    assert len(published) == 1
    assert broker.llen("celery") == before + 1
    assert sms.delay(1).id == published[0]  # deduplicated like delay
    sms.apply_async_on_commit((1,))  # outside a transaction: at once, and a duplicate
    assert len(published) == 1
    assert broker.llen("celery") == before + 1


def test_a_rollback_publishes_nothing_and_leaves_no_lock(
    sms: Any, broker: redis.Redis, published: list[str], orders_table: None
) -> None:
    from django.db import transaction

    before = broker.llen("celery")
    key = sms.lockkit_key_for((2,), {})
    with pytest.raises(RuntimeError), transaction.atomic():
        _save_order(2)
        sms.delay_on_commit(2)
        raise RuntimeError("payment declined")
    assert published == []
    assert broker.llen("celery") == before
    assert kit_for(sms.app).admin.list(key) == []
    assert sms.delay(2).id is not None  # the key is free: the next call is published
    assert len(published) == 1
