"""lockkit_django.tasks against real workers: the test project's tasks (tests/djproject/tasks.py)
stored by django-tasks-db in a database file, run by three real ``db_worker`` processes, locked
on the session's real redis-server. Each task body appends a line to a file per call, so the
tests count how often it ran.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from djchecks import run_checks
from djtasks_fixtures import TaskProject

from lockkit_core import ConfigError, LockKit
from lockkit_core.dedupe import id_prefix, run_key

THREADS = 8


def _order() -> int:
    return random.randrange(10**6, 10**7)


@pytest.mark.redis
def test_a_storm_of_duplicate_enqueues_gives_one_result_and_one_run(
    task_project: TaskProject,
) -> None:
    task_project.check_a_storm_runs_once("send_sms", THREADS)

    # The same storm on the plain @task twin: every caller queues its own task, each runs.
    order = _order()
    plain = task_project.enqueue("send_sms_unlocked", order, threads=THREADS)
    assert len(set(plain)) == THREADS
    for result_id in plain:
        task_project.wait_status("send_sms_unlocked", result_id, {"SUCCESSFUL"})
    assert task_project.settled_runs("send_sms_unlocked", order, THREADS, wait=0.2) == THREADS


@pytest.mark.redis
def test_once_answers_a_call_after_completion_with_the_first_result(
    task_project: TaskProject,
) -> None:
    order = _order()
    (first,) = task_project.enqueue("send_receipt", order)
    task_project.wait_status("send_receipt", first, {"SUCCESSFUL"})
    assert task_project.enqueue("send_receipt", order, threads=3) == [first] * 3
    assert [r[0] for r in task_project.rows("send_receipt")] == [first]
    assert task_project.settled_runs("send_receipt", order, 1, wait=0.3) == 1


@pytest.mark.redis
@pytest.mark.slow
def test_a_killed_worker_frees_its_locks_within_the_ttl_and_the_call_runs_again_once(
    task_project: TaskProject,
) -> None:
    order = _order()
    hold = task_project.folder / f"hold-{order}"
    hold.touch()
    (first,) = task_project.enqueue("export", order)
    _, _, (worker,) = task_project.wait_status("export", first, {"RUNNING"})
    while task_project.runs("export-start", order) < 1:
        time.sleep(0.02)
    from djproject import tasks

    key = tasks.export.lockkit.keys((order,), {})
    with LockKit(task_project.lock_url) as kit:
        assert kit.admin.info(run_key(first)) is not None, "the run lock is held while it runs"
        assert kit.admin.list(id_prefix(key)), "its id record is held while it runs"
        task_project.workers.kill(worker)
        killed = time.monotonic()
        # The run lock and the call's key (and its id record) expire with the same ttl.
        while (
            kit.admin.info(run_key(first)) is not None
            or kit.admin.info(key) is not None
            or kit.admin.list(id_prefix(key))
        ):
            assert time.monotonic() - killed < 1.5 + 1.5, "the run lock or the key outlived its ttl"
            time.sleep(0.02)
    fresh = task_project.workers.start()
    hold.unlink()
    (second,) = task_project.enqueue("export", order)
    assert second != first, "a new enqueue of the same call is accepted"
    _, _, ran_by = task_project.wait_status("export", second, {"SUCCESSFUL"})
    assert worker not in ran_by
    assert task_project.settled_runs("export", order, 1, wait=0.3) == 1
    # What the killed worker leaves behind: its row stays RUNNING, nothing runs it again.
    assert task_project.rows("export")[0][:2] == (first, "RUNNING")
    assert fresh in task_project.workers.procs


def _check_ids(lockkit: dict[str, Any]) -> list[str]:
    with override_settings(LOCKKIT=lockkit):
        return [m.id or "" for m in run_checks() if (m.id or "").startswith("lockkit.")]


def test_bad_task_settings_are_system_check_errors_naming_the_option() -> None:
    with override_settings(LOCKKIT={"URL": "memory://", "TASKS": {"TTL": -1}}):
        errors = [m for m in run_checks() if m.id == "lockkit.E003"]
    assert len(errors) == 1 and "LOCKKIT['TASKS']['TTL']" in errors[0].msg
    with override_settings(LOCKKIT={"URL": "memory://", "TASKS": {"ONCEE": 5}}):
        errors = [m for m in run_checks() if m.id == "lockkit.E003"]
    assert len(errors) == 1 and "ONCEE" in errors[0].msg and "ONCE" in errors[0].msg
    with override_settings(LOCKKIT={"URL": "memory://", "TASKS": {"ON_DUPLICATE": "drop"}}):
        errors = [m for m in run_checks() if m.id == "lockkit.E003"]
    assert len(errors) == 1 and "ON_DUPLICATE" in errors[0].msg
    assert "lockkit.E003" not in _check_ids({"URL": "memory://", "TASKS": {"ONCE": 60}})


def notify(order_id: int) -> None:
    """A module-level function, as django.tasks requires of a task."""


def test_bad_decorator_options_are_config_errors_naming_the_option() -> None:
    from lockkit_django.tasks import locked_task

    cases: list[tuple[dict[str, Any], str]] = [
        ({"once": "soon"}, "once"),
        ({"ttl": 0}, "ttl"),
        ({"wait": -1}, "wait"),
        ({"on_duplicate": "drop"}, "on_duplicate"),
        ({"enqueue_lock": "yes"}, "enqueue_lock"),
        ({"unique_on": ["order"]}, "order"),
        ({"key": "notify:{order}"}, "order"),
        ({"key": "k", "unique_on": ["order_id"]}, "unique_on"),
    ]
    for options, named in cases:
        with pytest.raises(ConfigError, match=named):
            locked_task(**options)(notify)


def test_keys_and_options_follow_the_celery_rules() -> None:
    from djproject import tasks

    keys = tasks.send_sms.lockkit.keys
    assert keys((7,), {}) == keys((), {"order_id": 7, "text": "other"})  # unique_on
    assert keys((7,), {}) != keys((8,), {})
    assert keys((7,), {}).startswith("task:djproject.tasks.send_sms:")
    with override_settings(LOCKKIT={"URL": "memory://", "TASKS": {"TTL": 9, "ONCE": 5}}):
        opts = tasks.send_sms.lockkit.options()
        assert (opts.ttl, opts.once) == (2.0, 5.0)  # the decorator beats the setting
    assert os.environ.get("DJANGO_SETTINGS_MODULE") == "djproject.settings"


def test_a_store_that_cannot_pass_a_lease_on_is_refused_at_enqueue() -> None:
    from djproject import tasks

    with (
        override_settings(LOCKKIT={"URL": "zookeeper://127.0.0.1:1/"}),
        pytest.raises(ConfigError, match=r"zookeeper://.*hand.*LOCKKIT\['URL'\]"),
    ):
        tasks.send_sms.enqueue(7)


def _dummy_backend() -> dict[str, Any]:
    from lockkit_django.tasks.compat import Task

    package = Task.__module__.rpartition(".")[0]  # django.tasks or django_tasks
    return {"default": {"BACKEND": f"{package}.backends.dummy.DummyBackend"}}


def test_a_duplicate_on_the_dummy_backend_is_answered_with_the_first_result() -> None:
    import threading

    from djproject import tasks

    order = _order()
    with override_settings(TASKS=_dummy_backend(), LOCKKIT={"URL": "memory://dummy-dup"}):
        first = tasks.send_sms.enqueue(order)
        again = tasks.send_sms.enqueue(order)
        assert again.id == first.id
        assert "_lockkit" not in again.kwargs
        # Another thread's DummyBackend has not got the result: it answers with its id.
        elsewhere: list[Any] = []
        thread = threading.Thread(target=lambda: elsewhere.append(tasks.send_sms.enqueue(order)))
        thread.start()
        thread.join()
        assert [r.id for r in elsewhere] == [first.id]
        assert len(tasks.send_sms.get_backend().results) == 1, "one task queued"


def test_the_task_row_does_not_carry_a_token_that_releases_the_lock() -> None:
    from djproject import tasks

    from lockkit_core import LockNotOwned
    from lockkit_django.conf import get_kit

    order = _order()
    with override_settings(TASKS=_dummy_backend(), LOCKKIT={"URL": "memory://dummy-owner"}):
        tasks.send_sms.enqueue(order)
        (stored,) = tasks.send_sms.get_backend().results  # what the backend keeps
        key = tasks.send_sms.lockkit.keys((order,), {})
        kit = get_kit()
        hidden = stored.kwargs["_lockkit"]
        values = [v for v in hidden.values() if isinstance(v, str)]
        assert values, hidden
        for value in values:
            with pytest.raises((LockNotOwned, ConfigError)):
                kit.lock(key, owner=value).release()
        assert kit.admin.info(key) is not None, "the lock is still held"


def test_the_frameworks_own_backends_dedupe_without_any_other_tasks_app() -> None:
    """As a user on Django 6's built-in tasks (or the backport) without django-tasks-db has it:
    the import works, two enqueues of one call name one result id on DummyBackend, and on
    ImmediateBackend a once call runs once and its duplicate names the first result."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("djtasks_builtin.py"))],
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert not seen["patched_by_tasks_db"], "django-tasks-db must not be imported here"
    first = seen["first"]
    assert seen["duplicate"] in ({"raised": first}, {"returned": first})
    assert seen["first_kwargs"] == {}, "the lock's hidden argument is not handed back"
    assert seen["other"] != first
    assert len(set(seen["plain"])) == 2, "a plain @task queues every call"
    assert seen["stored"] == [first, seen["other"], *seen["plain"]]
    now = seen["immediate"]
    assert (now["status"], now["value"]) == ("SUCCESSFUL", 70)
    assert now["duplicate"] in ({"raised": now["first"]}, {"returned": now["first"]})
    assert now["runs"] == [7], "the once window keeps the second call from running"


def test_a_task_run_before_its_enqueue_returns_leaves_no_record_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from djproject import tasks

    monkeypatch.setenv("DJTASKS_DIR", str(tmp_path))  # the body runs here, and notes it

    from lockkit_django.conf import get_kit
    from lockkit_django.tasks.compat import Task

    package = Task.__module__.rpartition(".")[0]
    immediate = {"default": {"BACKEND": f"{package}.backends.immediate.ImmediateBackend"}}
    order = _order()
    with override_settings(TASKS=immediate, LOCKKIT={"URL": "memory://immediate-record"}):
        result = tasks.send_sms.enqueue(order)  # runs here, before enqueue() returns
        assert str(result.status).endswith("SUCCESSFUL")
        key = tasks.send_sms.lockkit.keys((order,), {})
        kit = get_kit()
        assert kit.admin.info(key) is None
        assert kit.admin.list(id_prefix(key)) == [], "the id record outlived the call"
