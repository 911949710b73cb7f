"""The store batches that start and end a task's run (``Backend.begin_run``/``end_run``) on a
real redis-server: one atomic step each, the same answers as the calls they replace, and a
lease lost between start and end reported rather than freed under its new owner."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis

from benchmarks.redis_monitor import CommandCounter
from lockkit_core import LockKit
from lockkit_core.backends.base import Backend, owner_hint
from lockkit_core.dedupe import (
    Claim,
    Duplicate,
    RunGuard,
    TaskOptions,
    TaskRecords,
    claim_key,
    start_run,
)
from lockkit_core.dedupe.options import decide
from lockkit_core.dedupe.records import finished_key, run_key
from lockkit_core.lock import new_owner_token
from lockkit_core.testing import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def kit(redis_server: RedisServer) -> Iterator[LockKit]:
    kit = LockKit(redis_server.url, namespace=f"b{uuid.uuid4().hex[:8]}", ttl=10)
    try:
        yield kit
    finally:
        kit.close()


def _full(kit: LockKit, key: str) -> str:
    return f"{kit.namespace}:{key}"


def _pttl(server: RedisServer, kit: LockKit, key: str) -> int:
    return int(redis.Redis.from_url(server.url).pttl(f"lockkit:{{{_full(kit, key)}}}"))


# -- the backend operations ---------------------------------------------------------------------


def test_begin_run_leaves_the_key_alone_when_the_run_record_is_held(
    kit: LockKit, redis_server: RedisServer
) -> None:
    backend = kit.backend
    owner = new_owner_token()
    assert backend.try_acquire(_full(kit, "k"), owner, 5).acquired
    first, _ = backend.begin_run(_full(kit, "run"), new_owner_token(), _full(kit, "k"), owner, 5)
    assert first.acquired
    # A redelivered copy carries the same owner token: refused, and its adoption not made
    # (the key's lease is not stretched to the copy's 60 s).
    ran, kept = backend.begin_run(_full(kit, "run"), new_owner_token(), _full(kit, "k"), owner, 60)
    assert not ran.acquired and not kept.acquired
    assert ran.retry_after is not None and 0 < ran.retry_after <= 5
    assert 0 < _pttl(redis_server, kit, "k") <= 5000


def test_begin_run_races_give_the_run_and_the_key_to_one_copy(kit: LockKit) -> None:
    backend = kit.backend
    owner = new_owner_token()
    assert backend.try_acquire(_full(kit, "k"), owner, 10).acquired
    start = threading.Barrier(8)
    answers: list[tuple[bool, bool]] = []

    def copy() -> None:
        start.wait()
        ran, kept = backend.begin_run(
            _full(kit, "run"), new_owner_token(), _full(kit, "k"), owner, 10
        )
        answers.append((ran.acquired, kept.acquired))

    threads = [threading.Thread(target=copy) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [(False, False)] * 7 + [(True, True)]


def test_begin_run_does_not_adopt_a_key_another_owner_holds(kit: LockKit) -> None:
    backend = kit.backend
    assert backend.try_acquire(_full(kit, "k"), new_owner_token(), 10).acquired
    ran, kept = backend.begin_run(
        _full(kit, "run"), new_owner_token(), _full(kit, "k"), new_owner_token(), 10
    )
    assert ran.acquired and not kept.acquired


def test_end_run_reports_a_lost_lease_and_frees_nothing_of_its_new_owner(
    kit: LockKit,
) -> None:
    backend = kit.backend
    owner, run_owner, thief = new_owner_token(), new_owner_token(), new_owner_token()
    assert backend.try_acquire(_full(kit, "k"), owner, 10).acquired
    assert backend.begin_run(_full(kit, "run"), run_owner, _full(kit, "k"), owner, 10)[1].acquired
    assert backend.force_release(_full(kit, "k"))
    assert backend.try_acquire(_full(kit, "k"), thief, 10).acquired
    marker = (_full(kit, "done"), new_owner_token(), 30.0)
    answers = backend.end_run([(_full(kit, "k"), owner), (_full(kit, "run"), run_owner)], marker)
    assert answers == [False, True]
    held = backend.info(_full(kit, "k"))
    assert held is not None and backend.release(_full(kit, "k"), thief)
    assert backend.info(_full(kit, "run")) is None
    assert backend.info(_full(kit, "done")) is not None


def test_run_batches_keep_no_fencing_counter_for_their_records(
    kit: LockKit, redis_server: RedisServer
) -> None:
    # Every task leaves a finished marker for ``remember`` seconds, and takes a run record;
    # nobody reads their tokens, so a day-long fencing counter beside each would only cost the
    # server memory and work.
    backend = kit.backend
    owner, run_owner = new_owner_token(), new_owner_token()
    assert backend.try_acquire(_full(kit, "k"), owner, 10).acquired
    started = backend.begin_run(_full(kit, "run"), run_owner, _full(kit, "k"), owner, 10)
    assert started[1].acquired and started[1].token is not None
    marker = (_full(kit, "done"), new_owner_token(), 30.0)
    assert backend.end_run([(_full(kit, "k"), owner), (_full(kit, "run"), run_owner)], marker) == [
        True,
        True,
    ]
    done = backend.info(_full(kit, "done"))
    assert done is not None and done.token is not None
    # still above every token this client saw (the floor), as any token
    assert done.token > started[1].token
    client = redis.Redis.from_url(redis_server.url)
    stored = f"lockkit:{{{_full(kit, 'done')}}}"
    assert client.exists(stored) == 1
    assert client.exists(stored + ":f") == 0
    # nor for the run record, whose token nobody reads either
    assert client.exists(f"lockkit:{{{_full(kit, 'run')}}}:f") == 0
    # the locks it fences keep theirs
    assert client.exists(f"lockkit:{{{_full(kit, 'k')}}}:f") == 1


def test_a_cluster_mode_server_gets_one_call_per_lock() -> None:
    with RedisServer(cluster=True) as server:
        kit = LockKit(server.url, namespace=f"c{uuid.uuid4().hex[:8]}", ttl=5)
        raw = redis.Redis.from_url(server.url)
        try:
            backend: Backend = kit.backend
            owner, run_owner = new_owner_token(), new_owner_token()
            key, run = _full(kit, "order:1"), _full(kit, "task-record:run:1")
            assert backend.try_acquire(key, owner, 5).acquired
            ran, kept = backend.begin_run(run, run_owner, key, owner, 5)
            assert ran.acquired and kept.acquired
            assert backend.end_run([(key, owner), (run, run_owner)]) == [True, True]
            assert raw.keys("lockkit:{*}") == []
        finally:
            kit.close()
            raw.close()


# -- through the task policy --------------------------------------------------------------------


def _opts() -> TaskOptions:
    return decide({}, {}, 10.0)


def _enqueued(records: TaskRecords, key: str) -> str:
    owner = new_owner_token()
    assert records.take(key, owner, 10) is not False
    return owner


def test_a_redelivered_copy_is_refused_while_the_first_runs_and_dropped_after(
    kit: LockKit,
) -> None:
    records, opts = TaskRecords(kit), _opts()
    owner = _enqueued(records, "sms:1")
    first = start_run(records, "t", "sms:1", "id-1", opts, owner)
    assert isinstance(first, RunGuard)
    again = start_run(records, "t", "sms:1", "id-1", opts, owner)
    assert isinstance(again, Duplicate) and again.reason == "running"
    assert first.key_lock is not None and first.key_lock.owned()
    first.succeeded()
    first.ended()
    late = start_run(records, "t", "sms:1", "id-1", opts, owner)
    assert isinstance(late, Duplicate) and late.reason == "finished"
    assert records.lease("sms:1") is None and records.lease(run_key("id-1")) is None


def test_a_key_lost_during_the_run_is_reported_and_left_to_its_new_owner(
    kit: LockKit, caplog: pytest.LogCaptureFixture
) -> None:
    records, opts = TaskRecords(kit), _opts()
    owner = _enqueued(records, "sms:2")
    guard = start_run(records, "t", "sms:2", "id-2", opts, owner)
    assert isinstance(guard, RunGuard) and guard.key_lock is not None
    lost: list[str] = []
    guard.key_lock.on_lost.append(lambda lock: lost.append(lock.key))
    assert kit.backend.force_release(_full(kit, "sms:2"))
    other = new_owner_token()
    assert records.take("sms:2", other, 10) is not False
    with caplog.at_level(logging.WARNING):
        guard.ended()
    assert lost == ["sms:2"]
    assert "sms:2" in caplog.text and "lost" in caplog.text
    assert records.give_back("sms:2", other)  # still the new owner's
    assert records.lease(run_key("id-2")) is None
    assert records.lease(finished_key("id-2")) is not None


def test_a_run_taken_over_by_a_redelivered_copy_leaves_it_the_key_at_its_end(
    kit: LockKit, caplog: pytest.LogCaptureFixture
) -> None:
    # The first copy's worker stalled past its run record's lease; the broker redelivered the
    # task and the second copy adopted the call's key under the same owner token.
    records, opts = TaskRecords(kit), _opts()
    owner = _enqueued(records, "sms:9")
    first = start_run(records, "t", "sms:9", "id-9", opts, owner)
    assert isinstance(first, RunGuard)
    assert kit.backend.force_release(_full(kit, run_key("id-9")))
    second = start_run(records, "t", "sms:9", "id-9", opts, owner)
    assert isinstance(second, RunGuard) and second.key_lock is not None
    with caplog.at_level(logging.WARNING):
        first.ended()  # the first copy wakes up and ends
    assert second.key_lock.owned() and records.lease("sms:9") is not None, (
        "the first copy's end freed the key the second copy runs under"
    )
    assert "lost" in caplog.text
    second.succeeded()
    second.ended()
    assert records.lease("sms:9") is None and records.lease(run_key("id-9")) is None


def test_ending_a_failed_run_writes_the_finished_record_in_the_same_step(kit: LockKit) -> None:
    records, opts = TaskRecords(kit), _opts()
    owner = _enqueued(records, "sms:3")
    guard = start_run(records, "t", "sms:3", "id-3", opts, owner)
    assert isinstance(guard, RunGuard)
    guard.ended()  # no succeeded(): the task failed
    assert records.finished("id-3")
    assert records.lease("sms:3") is None and records.lease(run_key("id-3")) is None


def test_a_success_ends_the_run_in_one_store_command_with_its_finished_record(
    kit: LockKit, redis_server: RedisServer
) -> None:
    records, opts = TaskRecords(kit), _opts()
    owner = _enqueued(records, "sms:4")
    guard = start_run(records, "t", "sms:4", "id-4", opts, owner)
    assert isinstance(guard, RunGuard)
    with CommandCounter(redis_server.port) as seen:
        guard.succeeded()
        guard.ended()  # after the result is stored: nothing left to send
    assert seen.total == 1, seen.lines
    assert records.finished("id-4")
    assert records.lease("sms:4") is None and records.lease(run_key("id-4")) is None
    # a duplicate waiting on id-4 before its result is stored does not take it for lost
    assert not records.lost("id-4", "sms:4")
    assert records.lost("id-never-ran", "sms:4")


def test_with_once_the_key_stays_held_until_the_result_is_stored(kit: LockKit) -> None:
    records, opts = TaskRecords(kit), decide({"once": 60.0}, {}, 10.0)
    owner = _enqueued(records, "sms:5")
    guard = start_run(records, "t", "sms:5", "id-5", opts, owner)
    assert isinstance(guard, RunGuard)
    guard.succeeded()
    assert records.done("sms:5") and records.finished("id-5")
    assert records.lease("sms:5") is not None  # a call answered "done" must find the result
    guard.ended()
    assert records.lease("sms:5") is None and records.lease(run_key("id-5")) is None


# -- the server's work per task, and the waiters the short path leaves to lock.lua -------------


def test_a_run_without_waiters_costs_the_server_few_commands(
    kit: LockKit, redis_server: RedisServer
) -> None:
    # Start and end of a task's run on the happy path (the call was claimed at enqueue, its
    # task id derived from the claim): one script call each, and inside them only the
    # commands the records need (take run, adopt <key>; finished record, free both).
    records, opts = TaskRecords(kit), _opts()

    def run(key: str, counted: bool = False) -> None:
        claim = claim_key(records, "t", key, 10, once=False)
        assert isinstance(claim, Claim) and claim.task_id is not None
        with CommandCounter(redis_server.port) as seen:
            guard = start_run(records, "t", key, claim.task_id, opts, claim.owner)
            assert isinstance(guard, RunGuard)
            guard.succeeded()
            guard.ended()
        assert records.finished(claim.task_id) and records.lease(key) is None
        if counted:
            assert seen.total == 2, [line[:60] for line in seen.lines]
            assert len(seen.scripted) <= 14, seen.scripted

    run("sms:0")  # the scripts are loaded now
    run("sms:6", counted=True)


def test_a_waiter_on_the_key_is_handed_it_when_the_run_ends(
    kit: LockKit, redis_server: RedisServer
) -> None:
    records, opts = TaskRecords(kit), _opts()
    owner = _enqueued(records, "sms:7")
    guard = start_run(records, "t", "sms:7", "id-7", opts, owner)
    assert isinstance(guard, RunGuard)
    # another kit: its own connections and listener, as another process would have
    other = LockKit(redis_server.url, namespace=kit.namespace, ttl=10)
    waiter = other.lock("sms:7", ttl=10, reentrant=False, fair=True)
    got: list[float] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=8) and 1.0))
    thread.start()
    _wait_queued(kit, "sms:7")
    guard.succeeded()
    # handed to the waiter by the same store operation that freed it, in order: not left
    # free for the waiter to find out about later
    handed = records.lease("sms:7")
    thread.join(9)
    assert got == [1.0]
    assert handed is not None and waiter.owned()
    assert handed.owner_hint == owner_hint(waiter.owner or "")
    waiter.release()
    other.close()
    assert records.finished("id-7") and records.lease(run_key("id-7")) is None


def test_a_copy_waiting_on_the_run_record_finds_the_task_finished(
    kit: LockKit, redis_server: RedisServer
) -> None:
    records, opts = TaskRecords(kit), _opts()
    owner = _enqueued(records, "sms:8")
    first = start_run(records, "t", "sms:8", "id-8", opts, owner)
    assert isinstance(first, RunGuard)
    waits = decide({"wait": 8.0}, {}, 10.0)
    answers: list[object] = []
    other = LockKit(redis_server.url, namespace=kit.namespace, ttl=10)  # another worker
    copy = threading.Thread(
        target=lambda: answers.append(
            start_run(TaskRecords(other), "t", "sms:8", "id-8", waits, owner)
        )
    )
    copy.start()
    _wait_queued(kit, run_key("id-8"))
    # a third copy meanwhile: refused at once, the waiter's place kept
    third = start_run(records, "t", "sms:8", "id-8", opts, owner)
    assert isinstance(third, Duplicate) and third.reason == "running"
    first.succeeded()
    copy.join(9)
    other.close()
    assert len(answers) == 1
    answer = answers[0]
    assert isinstance(answer, Duplicate) and answer.reason == "finished"
    assert records.lease("sms:8") is None and records.lease(run_key("id-8")) is None


def _wait_queued(kit: LockKit, key: str) -> None:
    """Until a blocking caller has queued on ``key`` (lua/lock.lua's Q)."""
    import time

    backend = kit.backend
    queue = f"lockkit:{{{_full(kit, key)}}}:q"
    deadline = time.monotonic() + 5
    while not backend.client.exists(queue):  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"nobody queued on {key!r}"
        time.sleep(0.01)
