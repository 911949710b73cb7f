"""Waiting on ``mysql://``: one waiter per key polls, the rest queue in the server on a
``GET_LOCK`` waiting room, and every waiter gets the lock in turn."""

from __future__ import annotations

import threading
import time
import uuid

import pymysql
import pytest

from lockkit_core import LockKit
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
