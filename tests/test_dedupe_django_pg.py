"""Task dedupe with the locks in Django's own PostgreSQL database: ``django://default``.

The test project (tests/djproject) runs with ``DJPROJECT_DEFAULT=pg``: its ``default`` alias is
a database of the session's real PostgreSQL, migrated by ``manage.py migrate`` (which makes
the lease table through lockkit_django's migration). On it run real ``db_worker`` processes
(django.tasks, the task rows on PostgreSQL too) and a real Celery prefork worker on the real
Redis broker; both lock with ``LOCKKIT = {"URL": "django://default"}``.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery_support import Worker, events, producer_main, sms_held_open, wait_for
from djtasks_fixtures import TESTS, TaskProject

from lockkit_core import LockKit
from lockkit_core.testing import PostgresServer, RedisServer, TaskWorkers

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.timeout(180)]
psycopg = pytest.importorskip("psycopg")

THREADS = 8


@pytest.fixture(scope="module")
def project_env(postgres_server: PostgresServer) -> dict[str, str]:
    """The environment of a djproject process whose ``default`` is a fresh, migrated database
    on the session's PostgreSQL and whose lock store is ``django://default``."""
    name = f"dedupe_{os.getpid()}_{random.randrange(10**6)}"
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    env = {
        "PYTHONPATH": str(TESTS),
        "DJANGO_SETTINGS_MODULE": "djproject.settings",
        "DJPROJECT_DEFAULT": "pg",
        "DJPROJECT_PG_HOST": postgres_server.host,
        "DJPROJECT_PG_PORT": str(postgres_server.port),
        "DJPROJECT_PG_USER": postgres_server.user,
        "DJPROJECT_PG_NAME": name,
        "DJPROJECT_LOCKKIT_URL": "django://default",
    }
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "-v", "0"],
        env={**os.environ, **env},
        check=True,
        timeout=120,
    )
    return env


@pytest.fixture(scope="module")
def store_url(postgres_server: PostgresServer, project_env: dict[str, str]) -> str:
    """The project database as a ``postgresql://`` lock URL, to read its leases from here."""
    return postgres_server.url.rsplit("/", 1)[0] + "/" + project_env["DJPROJECT_PG_NAME"]


@pytest.fixture(scope="module")
def pg_tasks(
    project_env: dict[str, str], store_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TaskProject]:
    folder = tmp_path_factory.mktemp("djtasks-pg")
    env = {**project_env, "DJTASKS_DIR": str(folder)}
    with TaskWorkers(env, folder, count=3) as workers:
        yield TaskProject(env, folder / "unused", folder, workers, store_url, store_url)


def test_the_migration_made_the_lease_table_in_the_project_database(store_url: str) -> None:
    with psycopg.connect(store_url, autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass('lockkit_lease') IS NOT NULL").fetchone()
    assert found == (True,)


def test_django_tasks_storm_of_duplicate_enqueues_gives_one_result_and_one_run(
    pg_tasks: TaskProject,
) -> None:
    pg_tasks.check_a_storm_runs_once("send_sms", THREADS)


def test_django_tasks_once_records_live_in_the_postgresql_lease_table(
    pg_tasks: TaskProject,
) -> None:
    order = random.randrange(10**6, 10**7)
    (first,) = pg_tasks.enqueue("send_receipt", order)
    pg_tasks.wait_status("send_receipt", first, {"SUCCESSFUL"})
    assert pg_tasks.enqueue("send_receipt", order, threads=3) == [first] * 3
    assert pg_tasks.settled_runs("send_receipt", order, 1) == 1
    # the done record that answered the three calls is a row of the project database
    with LockKit(pg_tasks.lock_url) as kit:
        held = kit.backend.list("")
    assert any(lease.key.startswith("task-record:done:") for lease in held), held


@pytest.fixture(scope="module")
def base(redis_server: RedisServer) -> str:
    return redis_server.url.rsplit("/", 1)[0]


@pytest.fixture(scope="module")
def celery_worker(
    base: str, project_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Worker, dict[str, str]]]:
    env = {**project_env, "LOCKKIT_TEST_LOCK_URL": "django://default"}
    worker = Worker(base, tmp_path_factory.mktemp("celery-pg") / "worker.log", env=env)
    try:
        yield worker, env
    finally:
        worker.close()


def test_celery_storm_of_duplicate_enqueues_runs_once_with_the_lease_on_postgresql(
    base: str, celery_worker: tuple[Worker, dict[str, str]], store_url: str, tmp_path: Path
) -> None:
    _, env = celery_worker
    order = random.randrange(10**6, 10**7)
    ctx = multiprocessing.get_context("spawn")
    go = tmp_path / "go"
    outs = [tmp_path / f"ids{i}" for i in range(2)]
    procs = [
        ctx.Process(target=producer_main, args=(base, str(go), 25, str(out), order, env))
        for out in outs
    ]
    for p in procs:
        p.start()
    wait_for(lambda: all(Path(f"{out}.ready").exists() for out in outs), 60, "the producers")
    with sms_held_open(base, order):  # the run lasts until the last caller is done
        go.touch()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
    ids = [line for out in outs for line in out.read_text().split()]
    assert len(ids) == 50
    assert len(set(ids)) == 1, f"callers got {len(set(ids))} different task ids"

    def mine(kind: str) -> list[dict[str, object]]:
        found = events(base, "sms")
        return [e for e in found if e["kind"] == kind and e["order_id"] == order]

    wait_for(lambda: mine("end"), 30, "the SMS task to finish")
    time.sleep(2.0)  # a second execution would have started by now
    assert len(mine("start")) == 1
    # the run's "finished" record is a row of the project database
    with LockKit(store_url) as kit:
        keys = [lease.key for lease in kit.backend.list("celerytest:task-record:finished:")]
    assert f"celerytest:task-record:finished:{ids[0]}" in keys, keys
