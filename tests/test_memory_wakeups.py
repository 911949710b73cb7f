"""memory:// hand-overs: a release is never missed by a thread about to wait for it."""

from __future__ import annotations

import random
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from lockkit_core import LockKit

#: how long to keep handing one key over, and the CPU-bound threads competing meanwhile
RUN_FOR = 8.0
BURNERS = 3
#: the holder's lease: a missed release leaves the waiter asleep until this runs out
TTL = 30.0
#: the waiter's timeout; a hand-over slower than LATE counts as a lost wake-up
TIMEOUT = 3.0
LATE = 1.0


@pytest.fixture
def kit() -> Iterator[LockKit]:
    kit = LockKit(f"memory://wakeups-{uuid.uuid4().hex[:12]}", ttl=TTL, auto_renew=False)
    yield kit
    kit.close()


@pytest.fixture
def busy_interpreter() -> Iterator[None]:
    """Switch threads as often as the interpreter can, with CPU-bound threads competing, so a
    release lands inside the waiter's few-instruction window between its last attempt and its
    wait about as often as on a loaded machine (without this, hardly ever)."""
    before = sys.getswitchinterval()
    stop = threading.Event()

    def burn() -> None:
        while not stop.is_set():
            sum(range(100))

    burners = [threading.Thread(target=burn, daemon=True) for _ in range(BURNERS)]
    sys.setswitchinterval(1e-6)
    for t in burners:
        t.start()
    yield
    stop.set()
    for t in burners:
        t.join(5)
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("busy_interpreter")
def test_no_release_is_missed_by_a_waiter_going_to_sleep(kit: LockKit) -> None:
    """Hand one key from a holder to a fresh waiter thread over and over, the holder
    releasing at a random instant as the waiter makes its attempts and goes to sleep.

    A waiter that misses the release sleeps until the holder's 30 s lease would have run
    out, so its acquire times out though the key was free all along.
    """
    rng = random.Random(6)
    holder = kit.lock("handover", reentrant=False)
    waiting = threading.Event()
    released_at = 0.0
    latencies: list[float] = []

    def waiter() -> None:
        lock = kit.lock("handover", reentrant=False)
        waiting.set()
        got = lock.acquire(timeout=TIMEOUT)
        latencies.append(time.monotonic() - released_at if got else float("inf"))
        if got:
            lock.release()

    until = time.monotonic() + RUN_FOR
    while time.monotonic() < until:
        assert holder.acquire(timeout=TIMEOUT)
        waiting.clear()
        thread = threading.Thread(target=waiter)
        thread.start()
        assert waiting.wait(TIMEOUT)
        spin_until = time.perf_counter() + rng.uniform(0, 0.00003)
        while time.perf_counter() < spin_until:
            pass
        released_at = time.monotonic()
        holder.release()
        thread.join(TIMEOUT + 5)
        assert not thread.is_alive()
        if latencies[-1] > LATE:
            break  # one is enough; each costs a whole timeout

    late = [lat for lat in latencies if lat > LATE]
    assert not late, (
        f"hand-over {len(latencies)} missed the release: the waiter slept "
        f"{min(late[0], TIMEOUT):.2f} s (timeout {TIMEOUT} s) though the key was free"
    )
    assert len(latencies) >= 200, f"only {len(latencies)} hand-overs ran: too few to tell"
