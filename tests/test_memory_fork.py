"""memory:// across ``os.fork()``: a child forked while other threads use the store can use it.

Programs fork with threads running (a watchdog, a pre-forking server, ``multiprocessing``'s
"fork" start method). The child must not inherit a store locked by a thread it does not
have, nor a queue headed by a waiter it does not have.
"""

from __future__ import annotations

import os
import secrets
import threading
import uuid
from collections.abc import Iterator

import pytest
from forking import in_child
from polling import wait_until

from lockkit_core import LockKit

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

FORKS = 20
CHILD_LIMIT = 5.0


@pytest.fixture
def kit() -> Iterator[LockKit]:
    kit = LockKit(f"memory://fork-{uuid.uuid4().hex[:12]}", ttl=30.0, auto_renew=False)
    yield kit
    kit.close()


def test_a_child_forked_while_another_thread_uses_the_store_can_lock(kit: LockKit) -> None:
    backend = kit.backend
    stop = threading.Event()

    def busy() -> None:
        owner = secrets.token_hex(16)
        while not stop.is_set():
            backend.try_acquire("busy", owner, 30.0)
            backend.release("busy", owner)

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    try:

        def child() -> bool:
            return kit.lock("in-child").acquire(timeout=1.0)

        for forks in range(1, FORKS + 1):  # the first failure ends it: a hang costs seconds
            assert in_child(child, "os.fork", within=CHILD_LIMIT), f"child {forks} of {FORKS}"
    finally:
        stop.set()
        thread.join(5)


def test_a_parents_queued_waiter_does_not_block_the_child(kit: LockKit) -> None:
    backend = kit.backend
    key = kit.lock("queued").full_key
    holder = secrets.token_hex(16)
    # Held until the test lets go, so the parent's waiter is still queued at the fork (a
    # short lease could run out first under load, and hand the key to that waiter).
    assert backend.try_acquire(key, holder, 30.0).acquired
    waiter = threading.Thread(
        target=lambda: kit.lock("queued", fair=True).acquire(timeout=10.0), daemon=True
    )
    waiter.start()
    try:
        wait_until(lambda: (info := kit.admin.info("queued")) is not None and info.waiters == 1)

        def child() -> bool:
            # The holder's lease runs out here (soon, and unreleased, so the queue stays); the
            # parent's waiter, first in that queue, does not exist here.
            assert backend.extend(key, holder, 0.01)
            return kit.lock("queued").acquire(timeout=2.0)

        assert in_child(child, "os.fork", within=CHILD_LIMIT)
    finally:
        backend.release(key, holder)  # the parent's waiter takes it and returns
        waiter.join(5)
