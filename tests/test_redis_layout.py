"""What the redis:// backend leaves on the server: one hash slot per lock (Redis Cluster), owner
digests instead of secrets, fencing tokens and queue order that survive clock steps and
restarts, and the ``unix://`` scheme."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from polling import wait_until

from lockkit_core import BackendError, LockKit, LockNotOwned
from lockkit_core.testing import RedisServer

pytestmark = pytest.mark.redis


def _queue_length(raw: redis.Redis, namespace: str, key: str) -> int:
    return int(raw.zcard(f"lockkit:{{{namespace}:{key}}}:q"))


@pytest.fixture
def clock_server() -> Iterator[RedisServer]:
    """A redis-server whose wall clock the test steps (``step_clock``)."""
    try:
        server = RedisServer(fake_clock=True)
    except RuntimeError as exc:  # no C compiler to build the clock shifter
        pytest.skip(str(exc))
    with server:
        yield server


# -- Redis Cluster: every key of one lock in one slot -------------------------------------------


def test_every_operation_keeps_to_the_lock_keys_slot_on_a_cluster() -> None:
    with RedisServer(cluster=True) as server:
        namespace = f"c{uuid.uuid4().hex[:8]}"
        kit = LockKit(server.url, namespace=namespace, ttl=5)
        other = LockKit(server.url, namespace=namespace, ttl=5)
        raw = redis.Redis.from_url(server.url)
        try:
            holder = kit.lock("order:1")
            assert holder.acquire(timeout=2)
            assert other.lock("order:1").acquire(blocking=False) is False
            got: list[int | None] = []

            def wait() -> None:
                with other.lock("order:1", timeout=5) as held:
                    got.append(held.token)

            waiter = threading.Thread(target=wait)
            waiter.start()
            wait_until(lambda: _queue_length(raw, namespace, "order:1") == 1)
            holder.extend(5)
            slots = {raw.cluster("keyslot", name) for name in raw.keys(f"lockkit:*{namespace}*")}
            assert len(slots) == 1, f"one lock's keys span slots {slots}"
            holder.release()
            waiter.join(5)
            assert got and got[0] is not None and holder.token is None

            assert kit.lock("order:1", auto_renew=False).acquire(timeout=1)
            assert [info.key for info in kit.admin.list()] == ["order:1"]
            assert kit.admin.force_release("order:1") is True
            assert kit.admin.info("order:1") is None
        finally:
            kit.close()
            other.close()


# -- unix:// ------------------------------------------------------------------------------------


def test_unix_socket_url_connects_through_the_socket() -> None:
    with RedisServer(unix_socket=True) as server:
        kit = LockKit(server.unix_url + "?socket_timeout=2", namespace="unix", ttl=5)
        try:
            with kit.lock("k", timeout=1) as held:
                assert held.token is not None
                clients = redis.Redis.from_url(server.url).client_list()
                assert any("U" in client["flags"] for client in clients), clients
            assert kit.admin.info("k") is None
        finally:
            kit.close()


# -- owner secrets stay with the client ---------------------------------------------------------


def _everything_stored(raw: redis.Redis, namespace: str) -> list[bytes]:
    found: list[bytes] = []
    for name in raw.scan_iter(match=f"lockkit:*{namespace}*"):
        found.append(name)
        kind = raw.type(name)
        if kind == b"string":
            found.append(raw.get(name) or b"")
        elif kind == b"hash":
            for field, value in raw.hgetall(name).items():
                found += [field, value]
        elif kind == b"zset":
            found += list(raw.zrange(name, 0, -1))
    return found


def test_the_server_sees_only_digests_of_owner_secrets(redis_server: RedisServer) -> None:
    namespace = f"s{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(redis_server.url)
    spy = raw.pubsub()
    spy.psubscribe("lockkit:*")
    published: list[bytes] = []
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            message = spy.get_message(timeout=0.05)
            if message is not None and message["type"] == "pmessage":
                published.append(message["data"])

    listening = threading.Thread(target=listen)
    listening.start()
    kit = LockKit(redis_server.url, namespace=namespace, ttl=5)
    other = LockKit(redis_server.url, namespace=namespace, ttl=5)
    try:
        holder = kit.lock("secret")
        assert holder.acquire()
        secrets_seen = [holder.owner]
        got, done = threading.Event(), threading.Event()
        # fair=False: its hand-over is published (a blocking fair=True waiter reads its grant
        # from its list instead); past its first 10 ms at the head, it is handed the lock
        waiting = other.lock("secret", timeout=5)

        def wait() -> None:
            if waiting.acquire():
                got.set()
                done.wait(10)
                waiting.release()

        waiter = threading.Thread(target=wait)
        waiter.start()
        wait_until(lambda: _queue_length(raw, namespace, "secret") == 1)
        time.sleep(0.05)
        stored = _everything_stored(raw, namespace)
        holder.release()
        assert got.wait(5)
        secrets_seen.append(waiting.owner)
        stored += _everything_stored(raw, namespace)
        time.sleep(0.1)  # let the spy read the hand-over notice
        assert published, "the hand-over was not published where the spy listens"
        for secret in secrets_seen:
            assert secret is not None
            for blob in stored + published:
                assert secret.encode() not in blob, f"{blob!r} carries an owner secret"
                for start in range(len(secret) - 7):  # nor any part of one
                    part = secret[start : start + 8].encode()
                    assert part not in blob, f"{blob!r} carries part of an owner secret"

        # What the server shows cannot release or extend the lock.
        record = raw.get(f"lockkit:{{{namespace}:secret}}")
        assert record is not None
        shown = record.decode().split("|")[0]
        for guess in {shown[:32], shown[-32:]}:
            with pytest.raises(LockNotOwned):
                kit.lock("secret", owner=guess).release()
            with pytest.raises(LockNotOwned):
                kit.lock("secret", owner=guess).extend(5)
        assert kit.backend.release(f"{namespace}:secret", shown) is False
        info = kit.admin.info("secret")
        assert info is not None and info.token == waiting.token
        done.set()
        waiter.join(5)
        assert kit.admin.info("secret") is None
    finally:
        done.set()
        stop.set()
        listening.join(2)
        spy.close()
        kit.close()
        other.close()


# -- fencing tokens and queue order across clock steps and restarts -----------------------------


def test_fencing_tokens_never_go_back_when_the_server_clock_steps_back_or_restarts(
    clock_server: RedisServer,
) -> None:
    kit = LockKit(clock_server.url + "?socket_timeout=2", namespace="fence", ttl=5)
    tokens: list[int] = []

    def grant() -> None:
        with kit.lock("k", timeout=3) as held:
            assert held.token is not None
            tokens.append(held.token)

    try:
        for _ in range(3):
            grant()
        clock_server.step_clock(-3600)  # an hour back, while it runs
        for _ in range(3):
            grant()
        clock_server.restart()  # nothing persisted, and the clock is still an hour behind
        for _ in range(3):
            grant()
        clock_server.step_clock(-86400)
        grant()
        assert all(a < b for a, b in itertools.pairwise(tokens)), tokens
    finally:
        kit.close()


def test_a_free_key_leaves_only_an_expiring_fence_counter(redis_server: RedisServer) -> None:
    namespace = f"f{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(redis_server.url)
    kit = LockKit(redis_server.url, namespace=namespace, ttl=5)
    try:
        for i in range(3):
            with kit.lock(f"k{i}"):
                pass
        left = sorted(raw.keys(f"lockkit:*{namespace}*"))
        assert left == sorted(f"lockkit:{{{namespace}:k{i}}}:f".encode() for i in range(3))
        assert all(raw.pttl(name) > 0 for name in left), "a fence counter never expires"
        assert raw.keys("lockkit:fence") == []
    finally:
        kit.close()


def test_waiters_keep_their_order_when_the_server_clock_steps_back(
    clock_server: RedisServer,
) -> None:
    namespace = "order"
    raw = redis.Redis.from_url(clock_server.url)
    kit = LockKit(clock_server.url, namespace=namespace, ttl=10)
    holder = kit.lock("fifo")
    assert holder.acquire()
    order: list[int] = []
    threads = []
    try:
        for i in range(2):

            def wait(i: int = i) -> None:
                other = LockKit(clock_server.url, namespace=namespace, ttl=10)
                with other.lock("fifo", timeout=10):
                    order.append(i)
                other.close()

            thread = threading.Thread(target=wait)
            thread.start()
            threads.append(thread)
            wait_until(lambda i=i: _queue_length(raw, namespace, "fifo") == i + 1)
            clock_server.step_clock(-60)
        holder.release()
        for thread in threads:
            thread.join(10)
        assert order == [0, 1]
    finally:
        kit.close()


def test_a_server_clock_centuries_ahead_is_an_error_not_a_repeated_token(
    clock_server: RedisServer,
) -> None:
    # Past 2**53 microseconds (the year 2255) a token could no longer grow by one.
    clock_server.step_clock(231 * 365 * 86400)
    kit = LockKit(clock_server.url, namespace="far")
    try:
        with pytest.raises(BackendError, match="server clock"):
            kit.lock("k").acquire(blocking=False)
    finally:
        kit.close()
