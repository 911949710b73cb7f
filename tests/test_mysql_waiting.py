"""Waiting on ``mysql://``: one waiter per key polls, the rest queue in the server on a
``GET_LOCK`` waiting room, and every waiter gets the lock in turn."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pymysql
import pytest

from lockkit_core import Lock, LockKit
from lockkit_core.backends.base import Grant
from lockkit_core.testing.mariadb import MariaDBServer

pytestmark = pytest.mark.mysql


def _queued(server: MariaDBServer) -> int:
    """Sessions of the lock user waiting in a ``GET_LOCK``."""
    admin = pymysql.connect(host=server.host, port=server.port, user=server.user)
    try:
        with admin.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM information_schema.processlist "
                "WHERE user = %s AND state = 'User lock'",
                (server.user,),
            )
            return int(cursor.fetchone()[0])
    finally:
        admin.close()


def test_waiters_queue_on_the_server_and_each_gets_the_lock_in_turn(
    mariadb_server: MariaDBServer,
) -> None:
    namespace = f"wait{uuid.uuid4().hex[:10]}"
    kits = [LockKit(mariadb_server.url, namespace=namespace, ttl=30) for _ in range(6)]
    holder = kits[0].lock("q")
    assert holder.acquire()
    order: list[int] = []
    inside = [0]
    overlaps = [0]

    def wait(i: int) -> None:
        with kits[i].lock("q", timeout=20):
            inside[0] += 1
            overlaps[0] += inside[0] > 1
            order.append(i)
            time.sleep(0.05)
            inside[0] -= 1

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(1, 6)]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 5
        while _queued(mariadb_server) != 4:  # one polls at the head, four wait in the server
            assert time.monotonic() < deadline, "the waiters never queued in the server"
            time.sleep(0.02)
        holder.release()
        for thread in threads:
            thread.join(20)
        assert sorted(order) == [1, 2, 3, 4, 5]
        assert overlaps == [0]
    finally:
        for kit in kits:
            kit.close()


def test_a_thousand_asyncio_waiters_use_a_few_threads_and_one_poller(
    mariadb_server: MariaDBServer,
) -> None:
    """1,000 tasks of one loop wait on a held key: the statements run on the kit's few
    threads (never a thread per waiter), one waiter per key looks at the store while the
    others wait their turn on the loop, the release reaches a waiter at once, and the
    cancelled rest leave nothing behind."""
    namespace = f"await{uuid.uuid4().hex[:10]}"
    threads_before = threading.active_count()

    async def main() -> None:
        with LockKit(mariadb_server.url, namespace=namespace, ttl=30) as kit:
            holder = kit.lock("many")
            assert await holder.aacquire()
            got: list[tuple[float, Lock]] = []

            async def wait() -> None:
                lock = kit.lock("many")
                assert await lock.aacquire(timeout=60)
                got.append((time.monotonic(), lock))

            tasks = [asyncio.create_task(wait()) for _ in range(1000)]
            await asyncio.sleep(2.0)  # every waiter has registered and tried once
            assert not got
            most_threads = threading.active_count()
            attempts = [0]
            try_acquire = kit.backend.try_acquire

            def counted(key: str, owner: str, ttl: float) -> Grant:
                attempts[0] += 1
                return try_acquire(key, owner, ttl)

            kit.backend.try_acquire = counted  # type: ignore[method-assign]
            await asyncio.sleep(1.0)
            assert most_threads - threads_before <= 8, f"{most_threads} threads"
            # one waiter looks (every 50 ms at most), not a thousand
            assert attempts[0] < 60, f"{attempts[0]} attempts a second from waiting tasks"
            await holder.arelease()
            released = time.monotonic()
            while not got:
                await asyncio.sleep(0.005)
            assert got[0][0] - released < 0.5
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            assert len(got) == 1
            await got[0][1].arelease()
            assert kit.admin.info("many") is None
            rooms = kit.backend.aio().rooms  # type: ignore[attr-defined]
            assert not rooms, f"rooms left: {list(rooms)}"

    asyncio.run(main())
