"""memory:// specifics the contract suite does not reach: the waiter protocol at the backend,
state that must not outlive a free key, fences across that, adoption and FIFO order."""

from __future__ import annotations

import itertools
import secrets
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from lockkit_core import LockKit
from lockkit_core.backends.base import owner_hint
from lockkit_core.backends.memory import MemoryBackend

#: far longer than any wake-up should take: a waiter that sleeps this long missed one
LONG = 5.0
PROMPT = 0.5


def _owner() -> str:
    return secrets.token_hex(16)


@pytest.fixture
def kit() -> Iterator[LockKit]:
    kit = LockKit(f"memory://backend-{uuid.uuid4().hex[:12]}", ttl=30.0, auto_renew=False)
    yield kit
    kit.close()


@pytest.fixture
def backend(kit: LockKit) -> MemoryBackend:
    assert isinstance(kit.backend, MemoryBackend)
    return kit.backend


def _stored(backend: MemoryBackend) -> int:
    """How many keys the store keeps any state for."""
    return len(backend._store.entries)


def _timed_wait(backend: MemoryBackend, key: str, owner: str, act: str, *, fair: bool) -> float:
    """Register a waiter, fail an attempt, let ``act`` free the key (or the queue's head), then
    wait: the seconds the wait took."""
    holder = _owner()
    assert backend.try_acquire(key, holder, 30.0).acquired
    waiter = backend.waiter(key, owner, fair)
    try:
        assert not backend.try_acquire(key, owner, 30.0).acquired
        if act == "release":
            assert backend.release(key, holder)
        else:
            assert backend.force_release(key)
        start = time.monotonic()
        assert waiter.wait(LONG) is None
        return time.monotonic() - start
    finally:
        waiter.close(False)


# -- item 4: no lost wake-up -------------------------------------------------------------------


@pytest.mark.parametrize("fair", [False, True], ids=["unfair", "fair"])
@pytest.mark.parametrize("act", ["release", "force_release"])
def test_a_release_after_the_attempt_wakes_a_waiter_not_yet_asleep(
    backend: MemoryBackend, act: str, fair: bool
) -> None:
    """The waiter protocol: a waiter registered before its attempt is not put to sleep by a
    release that came between that attempt and ``wait()``."""
    took = _timed_wait(backend, "k", _owner(), act, fair=fair)
    assert took < PROMPT, f"wait() slept {took:.2f} s through a {act} it came after"


def test_a_fair_waiter_that_leaves_the_head_of_the_queue_wakes_the_next(
    backend: MemoryBackend,
) -> None:
    first, second = _owner(), _owner()
    holder = _owner()
    assert backend.try_acquire("q", holder, 30.0).acquired
    head = backend.waiter("q", first, True)
    nxt = backend.waiter("q", second, True)
    try:
        assert backend.release("q", holder)
        # The key is free but ``first`` is ahead: ``second`` waits its turn, and a newcomer
        # that never queued does not jump ahead either.
        assert not backend.try_acquire("q", second, 30.0).acquired
        assert not backend.try_acquire("q", _owner(), 30.0).acquired
        head.close(False)  # ``first`` gave up without taking it
        start = time.monotonic()
        assert nxt.wait(LONG) is None
        took = time.monotonic() - start
        assert took < PROMPT, f"the next in line slept {took:.2f} s after the head left"
        assert backend.try_acquire("q", second, 30.0).acquired
    finally:
        nxt.close(True)


# -- item 20: a free key costs nothing ---------------------------------------------------------


def test_a_hundred_thousand_free_keys_leave_nothing_behind(kit: LockKit) -> None:
    backend = kit.backend
    assert isinstance(backend, MemoryBackend)
    for i in range(100_000):
        lock = kit.lock(f"order:{i}")
        assert lock.acquire(blocking=False)
        lock.release()
    assert _stored(backend) == 0


def test_waiters_that_give_up_leave_nothing_behind(kit: LockKit) -> None:
    backend = kit.backend
    assert isinstance(backend, MemoryBackend)
    other = LockKit(backend.url.raw, ttl=30.0, auto_renew=False)
    try:
        for fair in (False, True):
            with kit.lock("busy"):
                assert other.lock("busy", fair=fair).acquire(timeout=0.05) is False
            assert _stored(backend) == 0
    finally:
        other.close()


def test_expired_leases_are_swept(backend: MemoryBackend) -> None:
    """Leases nobody releases (a crashed or leaking holder) do not pile up either."""
    for i in range(5_000):
        assert backend.try_acquire(f"leaked:{i}", _owner(), 0.01).acquired
    time.sleep(0.05)
    # A sweep comes within as many new keys as the store holds.
    for i in range(10_000):
        assert backend.try_acquire(f"fresh:{i}", (owner := _owner()), 30.0).acquired
        assert backend.release(f"fresh:{i}", owner)
    assert _stored(backend) == 0


# -- item 9 on memory: fences never go back when state is dropped ------------------------------


def test_tokens_keep_rising_across_dropped_state(backend: MemoryBackend) -> None:
    tokens: list[int] = []

    def grant(ttl: float = 30.0) -> str:
        owner = _owner()
        got = backend.try_acquire("fenced", owner, ttl)
        assert got.acquired and got.token is not None
        tokens.append(got.token)
        return owner

    assert backend.release("fenced", grant())  # released: the key's state is gone
    assert backend.force_release("fenced") is False
    grant()
    assert backend.force_release("fenced")  # force-released
    grant(ttl=0.01)
    time.sleep(0.03)  # expired, then swept by a burst of other keys
    for i in range(2 * MemoryBackend.SWEEP_AT):
        owner = _owner()
        assert backend.try_acquire(f"other:{i}", owner, 30.0).acquired
        assert backend.release(f"other:{i}", owner)
    assert "fenced" not in backend._store.entries
    grant()
    assert all(b > a for a, b in itertools.pairwise(tokens)), tokens


# -- adoption --------------------------------------------------------------------------------


def test_adopt_renews_the_owners_lease_and_returns_its_token(backend: MemoryBackend) -> None:
    owner = _owner()
    granted_at = time.monotonic()
    granted = backend.try_acquire("job", owner, 0.3)
    assert granted.acquired
    time.sleep(0.2)
    adopted_at = time.monotonic()
    adopted = backend.adopt("job", owner, 2.0)
    assert adopted.acquired and adopted.token == granted.token
    while time.monotonic() < granted_at + 0.4:  # past the first lease: only adopt() keeps it
        time.sleep(0.05)
    info = backend.info("job")
    asked_at = time.monotonic()
    assert info is not None and info.token == granted.token
    assert info.ttl_remaining is not None
    assert 2.0 - (asked_at - adopted_at) <= info.ttl_remaining <= 2.0
    assert backend.release("job", owner)


def test_adopt_never_takes_a_key_it_does_not_hold(backend: MemoryBackend) -> None:
    owner, stranger = _owner(), _owner()
    assert backend.adopt("free", owner, 5.0).acquired is False
    assert backend.info("free") is None
    assert _stored(backend) == 0
    assert backend.try_acquire("held", owner, 5.0).acquired
    assert backend.adopt("held", stranger, 5.0).acquired is False
    info = backend.info("held")
    assert info is not None and info.owner_hint == owner_hint(owner)
    assert backend.try_acquire("gone", stranger, 0.01).acquired
    time.sleep(0.03)
    assert backend.adopt("gone", stranger, 5.0).acquired is False
    assert backend.info("gone") is None


# -- fair=True ---------------------------------------------------------------------------------


def test_fair_waiters_get_the_lock_in_arrival_order(kit: LockKit) -> None:
    backend = kit.backend
    assert isinstance(backend, MemoryBackend)
    order: list[int] = []
    errors: list[BaseException] = []
    n = 6

    def wait_turn(i: int) -> None:
        try:
            with kit.lock("fifo", fair=True, timeout=LONG * 2):
                order.append(i)
                time.sleep(0.002)
        except BaseException as exc:
            errors.append(exc)

    threads = []
    with kit.lock("fifo"):
        for i in range(n):
            t = threading.Thread(target=wait_turn, args=(i,))
            t.start()
            threads.append(t)
            deadline = time.monotonic() + LONG
            while len(backend._store.entries["fifo"].queue) < i + 1:
                assert time.monotonic() < deadline, f"waiter {i} never queued"
                time.sleep(0.001)
    for t in threads:
        t.join(LONG * 2)
    assert not errors, errors
    assert order == list(range(n))
    assert _stored(backend) == 0
