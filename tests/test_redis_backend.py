"""Redis specifics the contract suite does not reach: scripts, stored layout, notification."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from typing import Any

import pytest
import redis
from polling import wait_until

from lockkit_core import BackendUnavailable, ConfigError, LockKit
from lockkit_core.backends.base import owner_id

pytestmark = pytest.mark.redis


@pytest.fixture
def kit(redis_server: Any) -> LockKit:
    return LockKit(redis_server.url, namespace=f"t{uuid.uuid4().hex[:8]}", ttl=5)


@pytest.fixture
def raw(redis_server: Any) -> redis.Redis:
    return redis.Redis.from_url(redis_server.url)


def test_stored_layout_carries_namespace_owner_token_and_holder(
    kit: LockKit, raw: redis.Redis
) -> None:
    with kit.lock("order:42") as held:
        value = raw.get(f"lockkit:{{{kit.namespace}:order:42}}")
        assert value is not None
        owner, token, started, holder = value.decode().split("|", 3)
        assert abs(int(started) / 1000 - time.time()) < 5  # the server's clock, same host
        assert held.owner is not None
        assert owner == owner_id(held.owner) != held.owner
        assert len(owner) == 40 and held.owner_hint and owner.startswith(held.owner_hint)
        assert int(token) == held.token
        assert "pid" in holder
        assert 0 < raw.pttl(f"lockkit:{{{kit.namespace}:order:42}}") <= 5000
    assert raw.get(f"lockkit:{{{kit.namespace}:order:42}}") is None


def test_scripts_are_reloaded_after_script_flush(kit: LockKit, raw: redis.Redis) -> None:
    with kit.lock("a"):
        pass
    raw.script_flush()
    with kit.lock("a") as held:
        assert held.token is not None
    assert kit.admin.info("a") is None


def test_a_retried_acquire_by_the_same_owner_keeps_the_token(kit: LockKit) -> None:
    # The answer to the first attempt may be lost on the way back; the retry must not
    # be refused as "busy" nor mint a second token.
    first = kit.backend.try_acquire(f"{kit.namespace}:k", "a" * 32, 5.0)
    again = kit.backend.try_acquire(f"{kit.namespace}:k", "a" * 32, 5.0)
    other = kit.backend.try_acquire(f"{kit.namespace}:k", "b" * 32, 5.0)
    assert first.acquired and again.acquired
    assert again.token == first.token
    assert not other.acquired
    assert other.retry_after is not None and 4.0 < other.retry_after <= 5.0


def test_fencing_tokens_of_one_key_strictly_increase(kit: LockKit, raw: redis.Redis) -> None:
    tokens = []
    for _ in range(20):
        with kit.lock("k") as held:
            tokens.append(held.token)
    assert all(a < b for a, b in itertools.pairwise(tokens)), tokens
    counter = raw.get(f"lockkit:{{{kit.namespace}:k}}:f")
    assert counter is not None and int(counter) == tokens[-1]


def test_a_waiter_is_woken_by_the_release_not_by_the_lease(kit: LockKit, raw: redis.Redis) -> None:
    holder = kit.lock("busy", ttl=30)
    holder.acquire()
    got_at: list[float] = []

    def wait() -> None:
        other = LockKit(config=kit.config)
        with other.lock("busy", timeout=10):
            got_at.append(time.monotonic())

    thread = threading.Thread(target=wait)
    thread.start()
    wait_until(lambda: raw.zcard(f"lockkit:{{{kit.namespace}:busy}}:q") == 1)
    released = time.monotonic()
    holder.release()
    thread.join(10)
    assert got_at, "waiter never got the lock"
    # Woken by the notice: the holder's lease had 29+ s left (and the waiter's timeout is
    # 10 s). A second leaves room for a loaded machine to schedule the waiter's thread.
    assert got_at[0] - released < 1.0, f"got it {got_at[0] - released:.3f} s after the release"


def test_admin_lists_by_prefix_with_tokens(kit: LockKit) -> None:
    held = [kit.lock(k) for k in ("job:1", "job:2", "other")]
    for lock in held:
        lock.acquire()
    try:
        listed = kit.admin.list("job:")
        assert [i.key for i in listed] == ["job:1", "job:2"]
        assert [i.token for i in listed] == [held[0].token, held[1].token]
        assert all(i.owner_hint and len(i.owner_hint) == 8 for i in listed)
        assert {i.key for i in kit.admin.list()} == {"job:1", "job:2", "other"}
    finally:
        for lock in held:
            lock.release()


def test_glob_characters_in_a_prefix_are_literal(kit: LockKit) -> None:
    with kit.lock("a*b"), kit.lock("axb"):
        assert [i.key for i in kit.admin.list("a*")] == ["a*b"]


def test_unreachable_server_is_unavailable_not_busy() -> None:
    kit = LockKit("redis://127.0.0.1:1/0?socket_connect_timeout=0.5")
    start = time.monotonic()
    with pytest.raises(BackendUnavailable, match="cannot reach redis"):
        kit.lock("x", timeout=0.1).acquire()
    assert time.monotonic() - start < 1.5


def test_unknown_option_is_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown option .sockettimeout.*socket_timeout"):
        LockKit("redis://127.0.0.1:6379/0?sockettimeout=1")


def test_wrong_password_is_unavailable(redis_server: Any) -> None:
    raw = redis.Redis.from_url(redis_server.url)
    raw.config_set("requirepass", "s3cret")
    try:
        kit = LockKit(redis_server.url.replace("redis://", "redis://:wrong@"))
        with pytest.raises(BackendUnavailable, match="redis"):
            kit.lock("x", timeout=0).acquire()
        good = LockKit(redis_server.url.replace("redis://", "redis://:s3cret@"))
        with good.lock("x", timeout=0) as held:
            assert held.token is not None
        assert "s3cret" not in repr(good)
    finally:
        authed = redis.Redis.from_url(redis_server.url, password="s3cret")
        authed.config_set("requirepass", "")


@pytest.mark.slow
def test_tokens_keep_increasing_across_a_restart_that_loses_the_data() -> None:
    from lockkit_core.testing.servers import RedisServer

    with RedisServer() as server:
        kit = LockKit(server.url, ttl=5)
        with kit.lock("k") as held:
            before = held.token
        server.restart()
        kit = LockKit(server.url, ttl=5)
        with kit.lock("k") as held:
            assert held.token is not None and before is not None
            assert held.token > before


def test_waiters_are_served_in_arrival_order(kit: LockKit, raw: redis.Redis) -> None:
    holder = kit.lock("fifo", ttl=10)
    holder.acquire()
    order: list[int] = []
    threads = []
    for i in range(4):

        def wait(i: int = i) -> None:
            other = LockKit(config=kit.config)
            with other.lock("fifo", timeout=10):
                order.append(i)
                time.sleep(0.02)

        thread = threading.Thread(target=wait)
        thread.start()
        threads.append(thread)
        # each one queues before the next arrives (a loaded machine may take its time)
        wait_until(lambda i=i: raw.zcard(f"lockkit:{{{kit.namespace}:fifo}}:q") == i + 1)
    holder.release()
    for thread in threads:
        thread.join(15)
    assert order == [0, 1, 2, 3]


def test_non_blocking_attempts_do_not_jump_the_queue(kit: LockKit, raw: redis.Redis) -> None:
    holder = kit.lock("q", ttl=10)
    holder.acquire()
    got: list[int | None] = []

    def wait() -> None:
        with LockKit(config=kit.config).lock("q", timeout=10) as held:
            got.append(held.token)
            time.sleep(0.3)

    thread = threading.Thread(target=wait)
    thread.start()
    deadline = time.monotonic() + 10
    while not raw.zcard(f"lockkit:{{{kit.namespace}:q}}:q"):  # queued (a slow machine)
        assert time.monotonic() < deadline, "the waiter never queued"
        time.sleep(0.01)
    holder.release()
    time.sleep(0.05)
    # The waiter was handed the lock on release; a passer-by cannot take it.
    assert not LockKit(config=kit.config).lock("q").acquire(blocking=False)
    thread.join(10)
    assert got and holder.token is None


def test_a_waiter_that_gives_up_passes_a_handed_lock_on(kit: LockKit, raw: redis.Redis) -> None:
    holder = kit.lock("pass", ttl=10)
    holder.acquire()
    results: dict[str, bool] = {}

    def impatient() -> None:
        results["impatient"] = LockKit(config=kit.config).lock("pass", timeout=0.3).acquire()

    def patient() -> None:
        lock = LockKit(config=kit.config).lock("pass", timeout=10)
        results["patient"] = lock.acquire()
        lock.release()

    first = threading.Thread(target=impatient)
    first.start()
    wait_until(lambda: raw.zcard(f"lockkit:{{{kit.namespace}:pass}}:q") == 1)  # queued first
    second = threading.Thread(target=patient)
    second.start()
    first.join(5)
    assert results["impatient"] is False
    holder.release()
    second.join(10)
    assert results["patient"] is True
    assert kit.admin.info("pass") is None
    assert raw.exists(f"lockkit:{{{kit.namespace}:pass}}:q") == 0


def test_a_dead_queued_waiter_is_skipped_after_its_entry_expires(
    kit: LockKit, raw: redis.Redis
) -> None:
    lock_key = f"lockkit:{{{kit.namespace}:ghost}}"
    holder = kit.lock("ghost", ttl=10)
    holder.acquire()
    # A waiter that died while queued: its entry expired long ago.
    raw.zadd(lock_key + ":q", {owner_id("d" * 32): 1})
    raw.hset(lock_key + ":e", owner_id("d" * 32), "1|10000|lockkit:w:gone|ghost")
    holder.release()
    assert kit.admin.info("ghost") is None
    with kit.lock("ghost", timeout=0) as held:
        assert held.token is not None


def _script_calls(raw: redis.Redis) -> int:
    stats = raw.info("commandstats")
    names = ("cmdstat_evalsha", "cmdstat_eval")
    return sum(int(stats.get(name, {}).get("calls", 0)) for name in names)


def test_adopt_renews_the_owners_lease_and_returns_its_token_in_one_round_trip(
    kit: LockKit, raw: redis.Redis
) -> None:
    full_key = f"{kit.namespace}:adopted"
    owner, stranger = "a" * 32, "b" * 32
    granted = kit.backend.try_acquire(full_key, owner, 1.0)
    assert granted.acquired
    before = _script_calls(raw)
    adopted = kit.backend.adopt(full_key, owner, 5.0)
    assert _script_calls(raw) - before == 1
    assert adopted.acquired and adopted.token == granted.token
    assert 4000 < raw.pttl(f"lockkit:{{{full_key}}}") <= 5000
    assert kit.backend.adopt(full_key, stranger, 5.0).acquired is False
    assert kit.backend.release(full_key, owner)
    # A free key is never taken by adoption.
    assert kit.backend.adopt(full_key, owner, 5.0).acquired is False
    assert kit.admin.info("adopted") is None


def test_the_script_run_is_the_file_as_written(kit: LockKit) -> None:
    from importlib import resources

    from lockkit_core.backends.redis.scripts import Script

    lua = resources.files("lockkit_core.backends.redis").joinpath("lua")
    names = sorted(entry.name for entry in lua.iterdir() if entry.name.endswith(".lua"))
    assert names == ["lock.lua", "runs.lua", "shared.lua"]
    for name in ("lock", "runs", "shared"):
        script = Script(kit.backend.client, name, 4)  # type: ignore[attr-defined]
        assert script.source == lua.joinpath(f"{name}.lua").read_text()
