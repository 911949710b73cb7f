"""memory:// in a child forked below Python (libc's ``fork()``: no at-fork hook runs, as uWSGI
without ``--py-call-uwsgi-fork-hooks``): the child's copy of the store keeps the fair queue of
its parent's waiting threads, which do not exist in the child. A waiter of the child must
still be served once the lease it waits for (the parent's, copied) runs out, as it is after
``os.fork`` (whose at-fork hook forgets the parent's waiters)."""

from __future__ import annotations

import os
import threading
import uuid

import pytest
from forking import FORK_PARAMS, in_child, run_case
from polling import wait_until

from lockkit_core import LockKit
from lockkit_core.backends.memory_store import store_named

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


@pytest.mark.parametrize("fork", FORK_PARAMS)
def test_a_forked_childs_fair_waiter_is_served_past_its_parents_queued_threads(
    fork: str,
) -> None:
    run_case(fair_waiter_is_served_past_its_parents_queued_threads, fork)


def fair_waiter_is_served_past_its_parents_queued_threads(fork: str) -> None:
    name = uuid.uuid4().hex
    with LockKit(f"memory://{name}", namespace="fork", ttl=30) as kit:
        holder = kit.lock("k", ttl=1.0, auto_renew=False)
        assert holder.acquire(blocking=False)
        queued = threading.Event()

        def parent_waiter() -> None:
            lock = kit.lock("k", fair=True, ttl=30, timeout=20, auto_renew=False)
            queued.set()
            if lock.acquire():
                lock.release()

        # The only thread besides the main one; in_child forks once it sleeps in the queue.
        thread = threading.Thread(target=parent_waiter, daemon=True)
        thread.start()
        assert queued.wait(5)
        # The parent's thread queues behind the holder (unless the holder's 1 s ran out
        # first, on a loaded machine: then there is no queue to inherit).
        wait_until(lambda: (info := kit.admin.info("k")) is None or info.waiters == 1)

        def wait_in_child() -> dict[str, int | bool]:
            # what the child's copy of the store holds before its first acquisition
            copied = len(store_named(name).entries[holder.full_key].queue)
            # the copied lease (1 s) runs out; nobody else in the child wants the key
            lock = kit.lock("k", fair=True, ttl=5, timeout=4, auto_renew=False)
            got = lock.acquire()
            if got:
                lock.release()
            return {"copied": copied, "got": got}

        child = in_child(wait_in_child, fork)
        # the holder's lease ran out meanwhile: the parent's thread takes the key
        thread.join(20)
    if fork != "os.fork":  # os.fork's at-fork hook forgets the parent's waiters at once
        assert child["copied"] == 1, "the parent's thread was not queued when the child was made"
    assert child["got"], (
        "the child's waiter was never served: its queue still held its parent's threads"
    )
