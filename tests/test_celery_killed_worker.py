"""A whole worker (main process and pool children) SIGKILLed mid-task, then a new worker.

The task is ``acks_late``, so the broker hands it to the next worker after its visibility
timeout (3 s here). Its lock ttl is 30 s: without ``lockkit_clear_stale_on_start`` the copy runs
once the dead child's lease is over; with it, the new worker frees the dead child's locks when it
becomes ready and the copy runs at once. Either way it runs exactly once more. These tests serve
their own queue with their own workers, as they kill them.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery_support import Worker, events, wait_for

from lockkit_celery.stale import dead_local_holder, pid_alive
from lockkit_core.dedupe import id_key, run_key
from lockkit_core.testing import RedisServer

HERE = Path(__file__).resolve().parent

pytestmark = [pytest.mark.redis, pytest.mark.timeout(240)]

TTL = 30.0
# A lease renewed every ttl/3 runs at least 2/3 of the ttl past the holder's death.
LEASE_LEFT = TTL * 2 / 3


@pytest.fixture(scope="module")
def base(redis_server: RedisServer) -> str:
    return redis_server.url.rsplit("/", 1)[0]


@pytest.fixture(scope="module")
def app(base: str) -> Any:
    os.environ["LOCKKIT_TEST_REDIS"] = base
    import celery_app

    assert base == celery_app.BASE, "celery_app was imported before the fixture set its Redis"
    return celery_app


@pytest.fixture
def workers(base: str, tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    try:
        yield started
    finally:
        for w in started:
            w.close()
        gc.collect()


def _events(base: str, kind: str, order_id: int) -> list[dict[str, Any]]:
    return [
        e for e in events(base, "whole_worker") if e["kind"] == kind and e["order_id"] == order_id
    ]


def _kill_whole_worker(worker: Worker, child_pid: int) -> float:
    os.killpg(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait(10)
    wait_for(lambda: not pid_alive(child_pid), 10, "the pool child to be gone")
    return time.time()


@pytest.mark.parametrize("clear_stale", [False, True], ids=["lease", "clear_on_start"])
def test_whole_worker_sigkill_then_a_new_worker_runs_the_task_exactly_once_more(
    base: str, app: Any, workers: list[Worker], tmp_path: Path, clear_stale: bool
) -> None:
    order_id = 300 + int(clear_stale)
    env = {"LOCKKIT_TEST_CLEAR_STALE": "1" if clear_stale else "0"}
    queue = app.WHOLE_WORKER_QUEUE
    workers.append(Worker(base, tmp_path / "first.log", env=env, queues=queue))
    result = app.whole_worker.delay(order_id)
    wait_for(lambda: _events(base, "start", order_id), 30, "the first run to start")
    child = int(_events(base, "start", order_id)[0]["pid"])
    killed_at = _kill_whole_worker(workers[0], child)

    second = Worker(base, tmp_path / "second.log", env=env, queues=queue)
    workers.append(second)
    assert result.get(timeout=90) == order_id
    time.sleep(1.0)  # a third run would have started by now
    runs = _events(base, "start", order_id)
    assert len(runs) == 2, runs  # the killed run, then exactly one more
    assert len(_events(base, "end", order_id)) == 1
    gap = float(runs[1]["at"]) - killed_at
    if clear_stale:
        assert gap < LEASE_LEFT - 1.0, f"the copy waited {gap:.1f} s: the dead lease was kept"
        assert f"cleared {run_key('')}" in second.log_text()
    else:
        assert gap >= LEASE_LEFT - 0.5, f"the copy ran {gap:.1f} s after the kill, beside a lease"
        assert "cleared" not in second.log_text()


def test_a_live_or_foreign_holder_is_never_dead() -> None:
    host = "this-host"
    assert not dead_local_holder(f"{host} pid {os.getpid()}", host)
    assert not dead_local_holder(None, host)
    assert not dead_local_holder("another-host pid 999999999", host)
    assert not dead_local_holder(f"{host} pid x", host)
    assert dead_local_holder(f"{host} pid 999999999", host)


def _take_in_a_process_that_exits(base: str, locks: list[tuple[str, float]]) -> None:
    """Take ``locks`` (key, ttl) in a process that then exits: their holder is this host and a
    pid that is gone."""
    code = (
        "import json, sys, celery_app\n"
        "from lockkit_celery import kit_for\n"
        "kit = kit_for(celery_app.app)\n"
        "for key, ttl in json.loads(sys.argv[1]):\n"
        "    lock = kit.lock(key, ttl=ttl, auto_renew=False, reentrant=False)\n"
        "    assert lock.acquire(blocking=False, timeout=0)\n"
    )
    env = {**os.environ, "LOCKKIT_TEST_REDIS": base, "PYTHONPATH": str(HERE)}
    subprocess.run([sys.executable, "-c", code, json.dumps(locks)], check=True, env=env, timeout=60)


def _free_all(kit: Any) -> None:
    for info in kit.admin.list(""):
        kit.admin.force_release(info.key)


def test_clear_stale_locks_leaves_queued_finished_and_live_locks(base: str, app: Any) -> None:
    """A dead producer's enqueue lock (the task is queued, not running), a finished task id's
    run lock, and a live process's run lock all stay; a dead holder's running task goes."""
    from lockkit_celery import clear_stale_locks, kit_for

    celery = app.app
    kit = kit_for(celery)
    _free_all(kit)
    _take_in_a_process_that_exits(
        base,
        [
            (run_key("dead-running"), 20),
            ("task:running:1", 20),
            (id_key("task:running:1", "dead-running"), 20),
            (run_key("dead-finished"), 86400),
            ("task:queued:1", 3600),
        ],
    )
    live = kit.lock(run_key("live-running"), ttl=20, auto_renew=False, reentrant=False)
    assert live.acquire(blocking=False, timeout=0)
    try:
        cleared = clear_stale_locks(celery, host=socket.gethostname())
        assert sorted(cleared) == sorted(
            [run_key("dead-running"), "task:running:1", id_key("task:running:1", "dead-running")]
        )
        left = {info.key for info in kit.admin.list("")}
        assert left == {run_key("dead-finished"), "task:queued:1", run_key("live-running")}
    finally:
        live.release()
        _free_all(kit)


def test_celery_lockkit_clear_stale_prints_what_it_freed(base: str, app: Any) -> None:
    from lockkit_celery import kit_for

    kit = kit_for(app.app)
    _free_all(kit)
    # The dead run lock must still have time left when the celery command, a process of its
    # own, gets to it (a lock about to run out is left to expire): 30 s, the longest task ttl
    # of celery_app (a longer one is a finished task's record), covers a loaded machine's
    # slow starts, where 20 s did not.
    _take_in_a_process_that_exits(
        base, [(run_key("cli-dead"), 30), (run_key("cli-finished"), 86400)]
    )
    env = {**os.environ, "LOCKKIT_TEST_REDIS": base, "PYTHONPATH": str(HERE)}
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "celery_app", "lockkit", "clear-stale"],
        check=False, cwd=HERE, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == f"cleared {run_key('cli-dead')}"
    assert {info.key for info in kit.admin.list("")} == {run_key("cli-finished")}
    _free_all(kit)


def test_the_setting_must_be_a_bool(app: Any) -> None:
    from lockkit_celery.stale import clear_on_start_enabled
    from lockkit_core import ConfigError

    celery = app.app
    celery.conf.lockkit_clear_stale_on_start = "yes"
    try:
        with pytest.raises(ConfigError, match="lockkit_clear_stale_on_start"):
            clear_on_start_enabled(celery)
    finally:
        celery.conf.lockkit_clear_stale_on_start = False
