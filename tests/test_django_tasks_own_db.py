"""lockkit_django.tasks with its locks in Django's own database: ``django://default``.

The test project runs on a database file served by real ``db_worker`` processes (as in
test_django_tasks), and its LOCKKIT URL is ``django://default``: the lease table lives in the
same SQLite file as the task rows, on connections of lockkit's own."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator

import pytest
from djtasks_fixtures import TESTS, TaskProject

from lockkit_core import LockKit
from lockkit_core.testing import TaskWorkers

pytestmark = pytest.mark.slow
THREADS = 8


@pytest.fixture(scope="module")
def own_db_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TaskProject]:
    folder = tmp_path_factory.mktemp("djtasks-own-db")
    db = folder / "tasks.sqlite3"
    env = {
        "PYTHONPATH": str(TESTS),
        "DJANGO_SETTINGS_MODULE": "djproject.settings",
        "DJPROJECT_DB": str(db),
        "DJPROJECT_LOCKKIT_URL": "django://default",
        "DJTASKS_DIR": str(folder),
    }
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--run-syncdb", "-v", "0"],
        env={**os.environ, **env},
        check=True,
        timeout=120,
    )
    with TaskWorkers(env, folder, count=3) as workers:
        yield TaskProject(env, db, folder, workers, f"sqlite://{db}")


def test_a_storm_of_duplicate_enqueues_gives_one_result_and_one_run(
    own_db_project: TaskProject,
) -> None:
    own_db_project.check_a_storm_runs_once("send_sms", THREADS)


def test_the_locks_live_in_the_project_database(own_db_project: TaskProject) -> None:
    order = random.randrange(10**6, 10**7)
    (first,) = own_db_project.enqueue("send_receipt", order)
    own_db_project.wait_status("send_receipt", first, {"SUCCESSFUL"})
    assert own_db_project.enqueue("send_receipt", order, threads=3) == [first] * 3
    # the lease table sits in the project's own database file, beside the task rows, and
    # the call's id record is in it, read as sqlite:// from here
    with sqlite3.connect(own_db_project.db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"lockkit_lease", "django_tasks_database_dbtaskresult"} <= tables
    with LockKit(own_db_project.lock_url) as kit:
        assert kit.backend.list(""), "the task's records are held in the project database"
