"""Checked by mypy (tests/test_typing.py), never run: what type checkers see of the public API.

Each ``# type: ignore[...]`` marks a call that must be rejected; mypy's ``warn_unused_ignores``
(strict) fails the check if one of them is accepted, so a signature that decays to ``Any``
is caught as surely as one that turns wrong.
"""

from __future__ import annotations

from typing_extensions import assert_type  # typing.assert_type is 3.11+; mypy checks as 3.10

from lockkit_celery import locked_task
from lockkit_core import LockKit


@locked_task
def send_sms(order_id: int, phone: str) -> bool:
    return bool(order_id and phone)


@locked_task(unique_on=["order_id"], once=86400, ttl=60.0, wait=0)
def charge(order_id: int, amount: float = 0.0) -> str:
    return f"{order_id}:{amount}"


@locked_task(key="report:{day}", bind=True)
def report(self: object, day: str) -> int:
    return len(day)


def check_tasks() -> None:
    assert_type(send_sms(7, "+100"), bool)
    assert_type(charge(7), str)
    assert_type(report("2026-11-25"), int)
    send_sms.delay(7, "+100")
    charge.delay(order_id=7, amount=1.5)
    report.delay("2026-11-25")
    send_sms.delay("7", "+100")  # type: ignore[arg-type]
    charge.delay(7, surcharge=1)  # type: ignore[call-arg]
    report.delay(day=1)  # type: ignore[arg-type]


def check_kit() -> None:
    kit = LockKit("memory://", ttl=5.0, timeout=None)
    kit.lock("k", ttl=1, timeout=-1)
    kit.lock("k", ttl=None, timeout=0.5)
    kit.lock("k", ttl="5")  # type: ignore[arg-type]
    kit.lock("k", timeout="forever")  # type: ignore[arg-type]
    assert_type(kit.lock("k").acquire(timeout=1.0), bool)

    @kit.locked("job:{n}", timeout=0)
    def job(n: int) -> list[int]:
        return [n]

    assert_type(job(3), list[int])
    job("3")  # type: ignore[arg-type]
