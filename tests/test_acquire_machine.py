"""The acquire state machine on its own: scripted store answers and a fake clock, no I/O.

Both drivers (blocking and asyncio) run this one machine, so its decisions are tested once."""

from __future__ import annotations

import pytest

from lockkit_core import lease
from lockkit_core.acquire import ATTEMPT, GIVE_BACK, REGISTER, Acquired, Plan, Step, Wait, plan
from lockkit_core.backends.base import Grant
from lockkit_core.errors import BackendUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def start(steps: Plan) -> Step:
    return next(steps)


def finish(steps: Plan, reply: Grant | None) -> Acquired | None:
    with pytest.raises(StopIteration) as done:
        steps.send(reply)
    result: Acquired | None = done.value.value
    return result


def test_a_free_key_is_one_attempt() -> None:
    clock = Clock()
    steps = plan("k", 10.0, blocking=True, timeout=None, queue_first=False, clock=clock)
    assert start(steps) is ATTEMPT
    clock.now += 0.001
    assert finish(steps, Grant(True, 7)) == Acquired(7, 100.0 + lease.validity(10.0))


def test_busy_without_blocking_is_none_after_one_attempt() -> None:
    steps = plan("k", 10.0, blocking=False, timeout=0, queue_first=False, clock=Clock())
    assert start(steps) is ATTEMPT
    assert finish(steps, Grant(False, retry_after=3.0)) is None


def test_busy_registers_then_attempts_then_waits_until_the_timeout() -> None:
    clock = Clock()
    steps = plan("k", 10.0, blocking=True, timeout=1.0, queue_first=False, clock=clock)
    assert start(steps) is ATTEMPT
    assert steps.send(Grant(False, retry_after=5.0)) is REGISTER
    assert steps.send(None) is ATTEMPT  # a release in between is not missed
    wait = steps.send(Grant(False, retry_after=5.0))
    assert wait == Wait(1.0)  # bounded by what is left of the timeout
    clock.now += 1.0
    assert finish(steps, None) is None  # the wait ended at the deadline


def test_queue_first_registers_before_the_first_attempt_and_takes_a_hand_over() -> None:
    clock = Clock()
    steps = plan("k", 10.0, blocking=True, timeout=None, queue_first=True, clock=clock)
    assert start(steps) is REGISTER
    assert steps.send(None) is ATTEMPT
    assert steps.send(Grant(False, retry_after=0.5)) == Wait(0.5)
    clock.now += 0.3
    got = finish(steps, Grant(True, 9, since=100.2))
    assert got == Acquired(9, 100.2 + lease.validity(10.0))


def test_a_hand_over_long_after_queueing_is_confirmed_by_an_attempt() -> None:
    clock = Clock()
    steps = plan("k", 1.0, blocking=True, timeout=None, queue_first=True, clock=clock)
    assert start(steps) is REGISTER
    assert steps.send(None) is ATTEMPT
    assert isinstance(steps.send(Grant(False, retry_after=0.5)), Wait)
    clock.now += 0.5  # more than ttl/10 after the entry was made
    assert steps.send(Grant(True, 9, since=100.0)) is ATTEMPT
    assert finish(steps, Grant(True, 9)) == Acquired(9, 100.5 + lease.validity(1.0))


def test_grants_dead_on_arrival_are_given_back_then_the_store_is_called_too_slow() -> None:
    clock = Clock()
    steps = plan("k", 0.1, blocking=True, timeout=None, queue_first=False, clock=clock)
    assert start(steps) is ATTEMPT
    for attempt in range(lease.MAX_DEAD_ON_ARRIVAL):
        clock.now += 0.2  # the answer took longer than the lease
        if attempt < lease.MAX_DEAD_ON_ARRIVAL - 1:
            assert steps.send(Grant(True, attempt)) is GIVE_BACK
            assert steps.send(None) is ATTEMPT
        else:
            assert steps.send(Grant(True, attempt)) is GIVE_BACK
            with pytest.raises(BackendUnavailable, match="round trip"):
                steps.send(None)
