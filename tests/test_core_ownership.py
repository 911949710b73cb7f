"""Who holds a lock: adoption by owner token, reentrancy per thread object, and non-reentrant
locks that belong to their acquisition (released from another thread, as asyncio code does)."""

from __future__ import annotations

import _thread
import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lockkit_core import LockKit, LockNotOwned
from lockkit_core.backends.base import owner_hint
from lockkit_core.testing import RedisServer

BACKENDS = ["memory", "file", pytest.param("redis", marks=pytest.mark.redis)]


@pytest.fixture(params=BACKENDS)
def kit(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LockKit]:
    scheme = request.param
    namespace = f"own{uuid.uuid4().hex[:10]}"
    if scheme == "memory":
        url = f"memory://{namespace}"
    elif scheme == "file":
        url = f"file://{tmp_path / 'locks'}"
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        url = server.url + "?socket_timeout=2&socket_connect_timeout=2"
    kit = LockKit(url, namespace=namespace, ttl=5)
    yield kit
    kit.close()


# -- adoption ---------------------------------------------------------------------------------


def test_adopting_a_free_key_never_takes_it(kit: LockKit) -> None:
    stranger = "0" * 32
    adopted = kit.lock("job", owner=stranger)
    with pytest.raises(LockNotOwned, match="does not hold"):
        adopted.acquire()
    with pytest.raises(LockNotOwned):
        adopted.acquire(timeout=0)
    assert kit.admin.info("job") is None, "adoption created a holder for a free key"


def test_adopting_someone_elses_lease_is_refused(kit: LockKit) -> None:
    holder = kit.lock("job", auto_renew=False)
    assert holder.acquire(timeout=0)
    other = "f" * 32
    with pytest.raises(LockNotOwned):
        kit.lock("job", owner=other).acquire()
    info = kit.admin.info("job")
    assert info is not None and holder.token == info.token
    holder.release()


def test_adoption_confirms_the_existing_lease_and_makes_no_second_holder(kit: LockKit) -> None:
    first = kit.lock("job", auto_renew=False)
    assert first.acquire(timeout=0)
    token, owner = first.token, first.owner
    assert owner is not None
    # The same process (or another one, after receiving the token) adopts it three times.
    adopted = [kit.lock("job", owner=owner, auto_renew=False) for _ in range(3)]
    results: list[bool] = []
    threads = [threading.Thread(target=lambda h=h: results.append(h.acquire())) for h in adopted]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == [True, True, True]
    for handle in adopted:
        assert handle.token in (None, token)
        assert handle.owner == owner
    info = kit.admin.info("job")
    assert info is not None and info.token == token
    assert info.owner_hint == owner_hint(owner)
    # A fresh owner still finds it busy: there is exactly one lease, the original one.
    assert not kit.lock("job").acquire(timeout=0)
    # Releasing through an adopted handle frees the key for everyone.
    release_thread = threading.Thread(target=adopted[0].release)
    release_thread.start()
    release_thread.join(10)
    assert kit.admin.info("job") is None
    with pytest.raises(LockNotOwned):
        first.release()


def test_adopted_handle_in_a_with_block(kit: LockKit) -> None:
    first = kit.lock("job", auto_renew=False)
    # Taken in another thread, as another process would: this thread does not re-enter it.
    taker = threading.Thread(target=first.acquire, args=(True, 0))
    taker.start()
    taker.join(10)
    assert first.owner is not None
    with kit.lock("job", owner=first.owner) as adopted:
        adopted.check()
        adopted.extend(3)
    assert kit.admin.info("job") is None


# -- reentrancy is per thread object ------------------------------------------------------------


def _reuse_ident(ident: int, body: Callable[[], object]) -> bool:
    """Start threads until one gets ``ident``, run ``body`` there; False if none got it."""
    seen: list[bool] = []

    def probe() -> None:
        if threading.get_ident() == ident:
            body()
            seen.append(True)

    for _ in range(2000):
        thread = threading.Thread(target=probe)
        thread.start()
        thread.join()
        if seen:
            return True
    return False


@pytest.mark.parametrize("fresh_handle", [False, True])
def test_a_new_thread_with_a_dead_threads_ident_does_not_inherit_its_hold(
    kit: LockKit, fresh_handle: bool
) -> None:
    shared = kit.lock("job", auto_renew=False)
    idents: list[int] = []

    def leak() -> None:
        assert shared.acquire(timeout=0)
        idents.append(threading.get_ident())  # exits without release

    thread = threading.Thread(target=leak)
    thread.start()
    thread.join()
    reentered: list[bool] = []

    def contend() -> None:
        handle = kit.lock("job", auto_renew=False) if fresh_handle else shared
        reentered.append(handle.acquire(timeout=0))

    if not _reuse_ident(idents[0], contend):
        pytest.skip("no new thread received the dead thread's ident")
    assert reentered == [False], "a new thread re-entered a dead thread's hold"
    kit.admin.force_release("job")


def _run_foreign(body: Callable[[], object]) -> int:
    """Run ``body`` on a thread started outside :mod:`threading` (as a C extension or an
    embedding server starts its workers) and wait for it to exit; its ident."""
    done = threading.Event()
    idents: list[int] = []

    def run() -> None:
        try:
            idents.append(threading.get_ident())
            body()
        finally:
            done.set()

    _thread.start_new_thread(run, ())
    assert done.wait(10)
    time.sleep(0.01)  # let it finish exiting, so that its ident may be reused
    return idents[0]


def test_a_foreign_thread_with_a_dead_foreign_threads_ident_does_not_inherit_its_hold(
    kit: LockKit,
) -> None:
    """threading.current_thread() answers the same dummy object for every thread not made by
    threading that gets a dead one's ident: reentrancy must not follow that object."""
    shared = kit.lock("job", auto_renew=False)
    leaked = _run_foreign(lambda: shared.acquire(timeout=0))  # exits without release
    assert shared.locked()
    reentered: list[bool] = []
    for _ in range(200):
        ident = _run_foreign(lambda: reentered.append(shared.acquire(timeout=0)))
        if ident == leaked:
            break
        reentered.clear()
    else:
        pytest.skip("no new thread received the dead thread's ident")
    assert reentered == [False], "a new thread re-entered a dead thread's hold"
    kit.admin.force_release("job")


# -- a non-reentrant lock belongs to its acquisition ------------------------------------------


def test_non_reentrant_lock_acquired_in_a_worker_is_released_on_the_event_loop(
    kit: LockKit,
) -> None:
    lock = kit.lock("view", reentrant=False)

    async def view() -> int | None:
        assert await asyncio.to_thread(lock.acquire, True, 5)
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, lock.owned)
        token = lock.token
        lock.check()
        lock.release()  # on the event loop's thread, not the worker's
        return token

    token = asyncio.run(view())
    assert token is None or token > 0
    assert kit.admin.info("view") is None
    assert not lock.owned()
    with pytest.raises(LockNotOwned):
        lock.release()


def test_non_reentrant_lock_still_excludes_its_own_thread(kit: LockKit) -> None:
    lock = kit.lock("view", reentrant=False)
    assert lock.acquire(timeout=0)
    assert not lock.acquire(timeout=0), "a non-reentrant lock was taken twice"
    done = threading.Event()
    threading.Thread(target=lambda: (lock.release(), done.set())).start()
    assert done.wait(10)
    assert kit.admin.info("view") is None
