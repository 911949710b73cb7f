"""lockkit_celery against a real prefork worker, Redis broker and result backend.

One worker serves the whole module. Every test fails with the locks turned off
(``LOCKKIT_TEST_UNLOCKED=1`` sets ``lockkit_enabled = False`` in the app).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery_support import (
    Worker,
    bare_chord_main,
    events,
    producer_main,
    sms_held_open,
    wait_for,
)
from otel_fixtures import Otel

from lockkit_core.testing import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def base(redis_server: RedisServer) -> str:
    return redis_server.url.rsplit("/", 1)[0]


@pytest.fixture(scope="module")
def app(base: str) -> object:
    os.environ["LOCKKIT_TEST_REDIS"] = base
    import celery_app

    assert base == celery_app.BASE, "celery_app was imported before the fixture set its Redis"
    return celery_app


@pytest.fixture(scope="module")
def worker(base: str, app: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    client = redis.Redis.from_url(f"{base}/1")
    client.flushall()
    client.close()
    w = Worker(base, tmp_path_factory.mktemp("celery") / "worker.log")
    try:
        yield w
    finally:
        w.close()
        gc.collect()  # results unsubscribe from the result backend while it still runs


def starts(base: str, task: str, order_id: int) -> list[dict[str, object]]:
    return [e for e in events(base, task) if e["kind"] == "start" and e["order_id"] == order_id]


def ends(base: str, task: str, order_id: int) -> list[dict[str, object]]:
    return [e for e in events(base, task) if e["kind"] == "end" and e["order_id"] == order_id]


def test_duplicate_enqueue_storm_runs_once_and_answers_one_task_id(
    base: str, worker: Worker, tmp_path: Path
) -> None:
    ctx = multiprocessing.get_context("spawn")
    go = tmp_path / "go"
    outs = [tmp_path / f"ids{i}" for i in range(4)]
    procs = [ctx.Process(target=producer_main, args=(base, str(go), 50, str(out))) for out in outs]
    for p in procs:
        p.start()
    # All four enqueue while the first run is queued or running, however late a loaded
    # machine schedules one of them (a first call that connects can take seconds): the run is
    # held open until the last caller is done, so one task id is the only right answer.
    wait_for(lambda: all(Path(f"{out}.ready").exists() for out in outs), 60, "the producers")
    with sms_held_open(base, 7):
        go.touch()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
    ids = [line for out in outs for line in out.read_text().split()]
    assert len(ids) == 200
    assert len(set(ids)) == 1, f"callers got {len(set(ids))} different task ids"
    wait_for(lambda: ends(base, "sms", 7), 30, "the SMS task to finish")
    time.sleep(2.0)  # a second execution would have started by now
    assert len(starts(base, "sms", 7)) == 1


def test_worker_sigkill_mid_task_reruns_once_after_the_lease(
    base: str, app: object, worker: Worker
) -> None:
    result = app.killed.delay(11)  # type: ignore[attr-defined]
    wait_for(lambda: ends(base, "killed", 11), 40, "the requeued task to finish")
    time.sleep(1.0)
    runs = starts(base, "killed", 11)
    assert len(runs) == 2, runs  # the killed run, then exactly one more
    assert len(ends(base, "killed", 11)) == 1
    # The requeued copy waited for the dead child's lease (ttl 3 s) to run out.
    assert float(runs[1]["at"]) - float(runs[0]["at"]) >= 2.5  # type: ignore[arg-type]
    assert result.get(timeout=10) == 11


def test_visibility_timeout_redelivery_never_runs_beside_the_first(
    base: str, app: object, worker: Worker
) -> None:
    celery_app = app.app  # type: ignore[attr-defined]

    def restore() -> None:
        with celery_app.connection_for_write() as conn:
            conn.default_channel.qos.restore_visible(num=10)

    result = app.slow_acks_late.delay(21, seconds=7.0)  # type: ignore[attr-defined]
    # The broker hands the task out again once its visibility timeout has passed, while the
    # first copy still runs. When a worker's transport restores unacked messages depends on
    # kombu's version (5.3: at start, then every 100 s), so this test also restores them
    # while the task runs, as a worker starting then would.
    deadline = time.monotonic() + 40
    while not result.ready() and time.monotonic() < deadline:
        restore()
        time.sleep(0.5)
    assert result.get(timeout=40) == 21
    wait_for(
        lambda: any(
            word in worker.log_text() for word in ("duplicate running", "duplicate finished")
        ),
        30,
        "the redelivered copy to be turned away",
    )
    assert len(starts(base, "slow_acks_late", 21)) == 1


def test_once_marker_skips_a_later_call_and_answers_the_first_id(
    base: str, app: object, worker: Worker
) -> None:
    first = app.once_sms.delay(31)  # type: ignore[attr-defined]
    assert first.get(timeout=20) == 31
    second = app.once_sms.delay(31, note="client retry")  # type: ignore[attr-defined]
    assert second.id == first.id
    assert second.get(timeout=5) == 31
    time.sleep(1.0)
    assert len(starts(base, "once_sms", 31)) == 1


def test_failure_releases_the_lock(base: str, app: object, worker: Worker) -> None:
    from lockkit_celery import kit_for

    first = app.boom.delay(41)  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        first.get(timeout=20)
    wait_for(lambda: not kit_for(app.app).admin.list("task:boom"), 5, "the lock to be freed")  # type: ignore[attr-defined]
    second = app.boom.delay(41)  # type: ignore[attr-defined]
    assert second.id != first.id
    with pytest.raises(ValueError):
        second.get(timeout=20)
    assert len(starts(base, "boom", 41)) == 2


def test_publish_failure_gives_the_enqueue_lock_back(base: str, app: object) -> None:
    from celery import Celery

    from lockkit_celery import kit_for, locked_task

    dead = Celery("dead_broker", broker="redis://127.0.0.1:1/1")
    dead.conf.update(lockkit_url=f"{base}/3", lockkit_namespace="celerytest-dead")

    @locked_task(app=dead, name="never_sent", unique_on=["order_id"])
    def never_sent(order_id: int) -> None: ...

    with pytest.raises(Exception) as caught:
        never_sent.apply_async((51,), retry=False)
    assert "lockkit" not in type(caught.value).__module__
    assert kit_for(dead).admin.list("") == []


def test_retries_with_countdown_keep_and_reenter_the_lock(
    base: str, app: object, worker: Worker
) -> None:
    first = app.flaky.delay(61)  # type: ignore[attr-defined]
    # While it retries, a duplicate is answered with the same task, not queued again.
    time.sleep(0.7)
    again = app.flaky.delay(61)  # type: ignore[attr-defined]
    assert again.id == first.id
    assert first.get(timeout=30) == 61
    attempts = [e["retries"] for e in starts(base, "flaky", 61)]
    assert attempts == [0, 1, 2]


def test_chain_runs_every_step_and_a_duplicate_step_is_refused_loudly(
    base: str, app: object, worker: Worker
) -> None:
    from celery import chain

    from lockkit_celery import TaskLocked

    whole = chain(app.sms.s(81, seconds=0.2), app.once_sms.s()).apply_async()  # type: ignore[attr-defined]
    assert whole.get(timeout=30) == 81
    assert len(starts(base, "once_sms", 81)) == 1

    running = app.sms.delay(82, seconds=2.0)  # type: ignore[attr-defined]
    with pytest.raises(TaskLocked) as refused:
        chain(app.sms.s(82, seconds=2.0), app.once_sms.s()).apply_async()  # type: ignore[attr-defined]
    assert refused.value.task_id == running.id
    assert "callbacks" in str(refused.value)
    assert running.get(timeout=30) == 82
    time.sleep(1.0)
    assert len(starts(base, "sms", 82)) == 1
    assert starts(base, "once_sms", 82) == []


def test_eager_mode_applies_the_same_locks(base: str, app: object) -> None:
    from lockkit_celery import kit_for

    celery_app = app.app  # type: ignore[attr-defined]
    kit = kit_for(celery_app)
    key = app.once_sms.lockkit_key_for((91,), {})  # type: ignore[attr-defined]
    held = kit.lock(key, ttl=30, reentrant=False)
    assert held.acquire(blocking=False, timeout=0)  # as if a worker ran it right now
    celery_app.conf.task_always_eager = True
    try:
        answer = app.once_sms.delay(91)  # type: ignore[attr-defined]
        assert starts(base, "once_sms", 91) == []
        assert answer.id is not None
        held.release()
        first = app.once_sms.delay(91)  # type: ignore[attr-defined]
        again = app.once_sms.delay(91)  # type: ignore[attr-defined]
        assert first.get() == 91
        assert again.id == first.id
    finally:
        celery_app.conf.task_always_eager = False
    assert len(starts(base, "once_sms", 91)) == 1


def test_raise_policy_names_the_running_task_and_duplicates_are_counted(
    base: str, app: object, worker: Worker
) -> None:
    from lockkit_celery import TaskLocked, duplicate_counts, task_duplicate

    seen: list[dict[str, object]] = []

    def on_duplicate(sender: object, **info: object) -> None:
        seen.append(info)

    task_duplicate.connect(on_duplicate, weak=False)
    try:
        before = duplicate_counts().get(("sms", "enqueued"), 0)
        first = app.sms.delay(101, seconds=2.0)  # type: ignore[attr-defined]
        with pytest.raises(TaskLocked) as refused:
            app.sms.apply_async((101,), {"seconds": 2.0}, lockkit={"on_duplicate": "raise"})  # type: ignore[attr-defined]
        assert refused.value.task_id == first.id
        assert app.sms.delay(101, seconds=2.0).id == first.id  # type: ignore[attr-defined]
        assert duplicate_counts()[("sms", "enqueued")] == before + 2
        assert [s["original_id"] for s in seen] == [first.id, first.id]
        assert first.get(timeout=30) == 101
    finally:
        task_duplicate.disconnect(on_duplicate)
    assert len(starts(base, "sms", 101)) == 1


def test_send_task_duplicates_are_stopped_by_the_worker(
    base: str, app: object, worker: Worker
) -> None:
    celery_app = app.app  # type: ignore[attr-defined]
    first = celery_app.send_task("sms", (102,), {"seconds": 2.0})
    time.sleep(0.5)
    second = celery_app.send_task("sms", (102,), {"seconds": 2.0})
    assert first.id != second.id  # send_task bypasses the task class: no enqueue lock
    assert first.get(timeout=30) == 102
    wait_for(lambda: "duplicate busy" in worker.log_text(), 20, "the worker to skip the copy")
    time.sleep(1.0)
    assert len(starts(base, "sms", 102)) == 1


def test_countdown_keeps_the_enqueue_lock_until_the_task_runs(
    base: str, app: object, worker: Worker
) -> None:
    sent = time.time()
    first = app.sms.apply_async((103,), {"seconds": 0.2}, countdown=2.0)  # type: ignore[attr-defined]
    time.sleep(1.0)
    again = app.sms.delay(103, seconds=0.2)  # type: ignore[attr-defined]
    assert again.id == first.id
    assert first.get(timeout=30) == 103
    time.sleep(1.0)
    runs = starts(base, "sms", 103)
    assert len(runs) == 1
    assert float(runs[0]["at"]) >= sent + 1.9  # type: ignore[arg-type]


def test_per_call_key_and_retry_policy_serialise_instead_of_dropping(
    base: str, app: object, worker: Worker
) -> None:
    from lockkit_celery import kit_for

    options = {"key": "custom:105", "on_duplicate": "retry"}
    first = app.sms.apply_async((105,), {"seconds": 2.0}, lockkit=options)  # type: ignore[attr-defined]
    wait_for(lambda: starts(base, "sms", 105), 20, "the first run to start")
    assert kit_for(app.app).admin.info("custom:105") is not None  # type: ignore[attr-defined]
    second = app.sms.apply_async((105,), {"seconds": 2.0}, lockkit=options)  # type: ignore[attr-defined]
    assert second.id != first.id  # "retry" queues the duplicate; the worker runs it later
    assert first.get(timeout=30) == 105
    assert second.get(timeout=40) == 105
    runs, done = starts(base, "sms", 105), ends(base, "sms", 105)
    assert len(runs) == 2
    assert float(runs[1]["at"]) >= float(done[0]["at"])  # type: ignore[arg-type]


def test_a_duplicate_skipped_by_the_worker_resolves_to_the_original_s_result(
    base: str, app: object, worker: Worker
) -> None:
    celery_app = app.app  # type: ignore[attr-defined]
    first = celery_app.send_task("sms", (104,), {"seconds": 1.5})
    time.sleep(0.5)
    second = celery_app.send_task("sms", (104,), {"seconds": 1.5})
    assert first.get(timeout=30) == 104
    assert second.get(timeout=20) == 104, "the duplicate's result is the original's"
    assert second.state == "SUCCESS"
    time.sleep(1.0)
    assert len(starts(base, "sms", 104)) == 1


def test_a_chord_with_a_duplicate_member_fires_once_with_every_value(
    base: str, app: object, worker: Worker, tmp_path: Path
) -> None:
    # A producer that does not have the tasks (no lockkit base): the worker sees duplicates.
    out = tmp_path / "chord"
    producer = multiprocessing.get_context("spawn").Process(
        target=bare_chord_main, args=(base, str(out))
    )
    producer.start()
    producer.join(60)
    assert producer.exitcode == 0
    whole = app.app.AsyncResult(out.read_text())  # type: ignore[attr-defined]
    assert whole.get(timeout=30) == [107, 107]
    time.sleep(2.0)
    fired = [e for e in events(base, "collect") if e["order_id"] == 107]
    assert len(fired) == 1, fired
    assert len(starts(base, "sms", 107)) == 1


def test_duplicates_are_counted_on_opentelemetry_with_the_action_taken(
    base: str, app: object, worker: Worker, otel: Otel
) -> None:
    from lockkit_celery import TaskLocked

    def counted(action: str) -> int:
        match = {"lockkit.task": "sms", "lockkit.reason": "enqueued", "lockkit.action": action}
        return otel.count("lockkit.task.duplicates", "celerytest", match)

    raised, skipped = counted("raise"), counted("skip")
    first = app.sms.delay(103, seconds=1.0)  # type: ignore[attr-defined]
    with pytest.raises(TaskLocked):
        app.sms.apply_async((103,), {"seconds": 1.0}, lockkit={"on_duplicate": "raise"})  # type: ignore[attr-defined]
    assert app.sms.delay(103, seconds=1.0).id == first.id  # type: ignore[attr-defined]
    assert (counted("raise"), counted("skip")) == (raised + 1, skipped + 1)
    [point] = [
        p
        for p in otel.points("lockkit.task.duplicates", "celerytest")
        if p.attributes["lockkit.action"] == "raise"
    ]
    assert point.attributes["lockkit.backend"] == "redis"
    assert "103" not in repr(dict(point.attributes))  # the call's key is never an attribute
    assert first.get(timeout=30) == 103
