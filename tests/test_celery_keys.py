"""Task lock keys: one call, one key, whatever the argument style; bad options fail early."""

from __future__ import annotations

import datetime
import decimal
import uuid

import pytest
from celery import Celery

from lockkit_celery import TaskKey, locked_task
from lockkit_core import ConfigError, LockKit
from lockkit_core.dedupe import derived_task_id
from lockkit_core.testing.servers import RedisServer


def send(order_id: int, phone: str, text: str = "paid", *, urgent: bool = False) -> None: ...


def test_same_call_same_key_whatever_the_style() -> None:
    key = TaskKey("sms", send)
    calls = [
        key((7, "+33"), {}),
        key((7,), {"phone": "+33"}),
        key((), {"phone": "+33", "order_id": 7}),
        key((), {"order_id": 7, "phone": "+33", "text": "paid", "urgent": False}),
        key((7, "+33", "paid"), {"urgent": False}),
    ]
    assert len(set(calls)) == 1
    assert calls[0].startswith("task:sms:")
    assert key((8, "+33"), {}) != calls[0]
    assert key((7, "+33"), {"urgent": True}) != calls[0]


def test_uuid_date_decimal_key_like_their_text_in_the_worker() -> None:
    def pay(ref: object, day: object, amount: object) -> None: ...

    key = TaskKey("pay", pay)
    ref = uuid.UUID("12345678-1234-5678-1234-567812345678")
    producer = key((ref, datetime.date(2026, 11, 23), decimal.Decimal("9.90")), {})
    worker = key((str(ref), "2026-11-23", "9.90"), {})
    assert producer == worker


def test_unique_on_keys_only_the_named_arguments() -> None:
    key = TaskKey("sms", send, unique_on=["order_id"])
    assert key((7, "+33"), {}) == key((7, "+44"), {"text": "late"})
    assert key((7, "+33"), {}) != key((8, "+33"), {})


def test_template_and_callable_keys() -> None:
    assert TaskKey("sms", send, key="sms:{order_id}")((7, "+33"), {}) == "sms:7"
    by_call = TaskKey("sms", send, key=lambda order_id, *_, **__: f"o{order_id}")
    assert by_call((7, "x"), {}) == by_call((), {"phone": "x", "order_id": 7}) == "o7"


def test_unique_on_a_non_parameter_fails_at_decoration() -> None:
    app = Celery("keys_test")
    with pytest.raises(ConfigError, match="order_idx"):

        @locked_task(app=app, unique_on=["order_idx"])
        def task(order_id: int) -> None: ...


def test_unknown_on_duplicate_fails_at_decoration() -> None:
    with pytest.raises(ConfigError, match="on_duplicate"):
        locked_task(on_duplicate="ignore")


def test_a_bound_task_keys_without_self() -> None:
    app = Celery("keys_test")

    @locked_task(app=app, bind=True, unique_on=["order_id"], name="bound")
    def bound(self: object, order_id: int) -> None: ...

    assert bound.lockkit_key_for((7,), {}) == bound.lockkit_key_for((), {"order_id": 7})


def test_the_derived_task_id_does_not_depend_on_how_the_store_url_is_spelled(
    redis_server: RedisServer,
) -> None:
    # A producer that names the server by address and one that names it by host name must
    # agree on the id of the task a lock's grant stands for, or a duplicate would answer an
    # AsyncResult of a task id that was never published.
    by_address = LockKit(redis_server.url, namespace="shop")
    by_name = LockKit(redis_server.url.replace("127.0.0.1", "localhost"), namespace="shop")
    try:
        assert by_address.backend.describe() != by_name.backend.describe()
        assert derived_task_id(by_address, "k", 42) == derived_task_id(by_name, "k", 42)
        assert derived_task_id(by_address, "k", 42) != derived_task_id(by_address, "k", 43)
        assert derived_task_id(by_address, "k", 42) != derived_task_id(by_address, "j", 42)
    finally:
        by_address.close()
        by_name.close()


@pytest.mark.parametrize("key", ["k", "sms:7:+33", "réservation:42", "x" * 300])
@pytest.mark.parametrize("token", [1, 42, 1_764_130_000_000_000, 2**53 - 1])
def test_the_derived_task_id_is_the_uuid5_of_namespace_key_and_token(
    redis_server: RedisServer, key: str, token: int
) -> None:
    # Producers and workers of two releases (a rolling deploy) must agree on it: it is
    # RFC 4122's UUID5 of "lockkit|<namespace>|<key>|<token>" in the URL namespace.
    kit = LockKit(redis_server.url, namespace="shop")
    try:
        name = f"lockkit|shop|{key}|{token}"
        assert derived_task_id(kit, key, token) == str(uuid.uuid5(uuid.NAMESPACE_URL, name))
    finally:
        kit.close()


def test_the_core_dedupe_module_imports_no_framework() -> None:
    import subprocess
    import sys

    code = (
        "import sys, lockkit_core.dedupe\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules}"
        " & {'celery', 'kombu', 'django', 'flask'})\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_store_that_cannot_pass_a_lease_on_is_refused_before_any_task_is_sent() -> None:
    """ZooKeeper leases end with the session that took them, so the enqueue lock could not
    travel to the worker: say so when the kit is made, not as NotSupported at enqueue."""
    from lockkit_celery import kit_for

    app = Celery("zk_tasks", broker="memory://", set_as_current=False)
    app.conf.lockkit_url = "zookeeper://127.0.0.1:1/"
    with pytest.raises(ConfigError, match=r"zookeeper://.*hand.*redis://") as caught:
        kit_for(app)
    assert "lockkit_url" in str(caught.value)
