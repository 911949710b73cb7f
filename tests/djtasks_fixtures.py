"""Fixtures for lockkit_django.tasks: the test project (tests/djproject) on a database file,
migrated once, served by real ``db_worker`` processes for the whole session, its locks on
the session's real redis-server. Registered in conftest.py."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lockkit_core.testing import RedisServer, TaskWorkers

TESTS = Path(__file__).resolve().parent


@dataclass
class TaskProject:
    """The project, its database file, its workers and the folder its tasks write to."""

    env: dict[str, str]
    db: Path
    folder: Path
    workers: TaskWorkers
    lock_url: str
    #: set when the project's database is this PostgreSQL one (``db`` is then unused)
    pg_conninfo: str | None = None

    def enqueue(self, task: str, order_id: int, threads: int = 1) -> list[str]:
        """``threads`` threads of one new process enqueue ``task(order_id)`` at once."""
        done = subprocess.run(
            [sys.executable, str(TESTS / "djtasks_client.py"), task, str(order_id), str(threads)],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        ids: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
        return [str(uuid.UUID(i)) for i in ids]

    def rows(self, task: str) -> list[tuple[str, str, list[str]]]:
        """(id, status, worker ids) of every stored result of ``task``."""
        sql = (
            "SELECT id, status, worker_ids FROM django_tasks_database_dbtaskresult "
            "WHERE task_path = ? ORDER BY enqueued_at"
        )
        params = [f"djproject.tasks.{task}"]
        found: list[tuple[Any, ...]]
        if self.pg_conninfo is not None:
            import psycopg

            with psycopg.connect(self.pg_conninfo, autocommit=True) as conn:
                found = conn.execute(sql.replace("?", "%s"), params).fetchall()
        else:
            with sqlite3.connect(self.db, timeout=30) as db:
                found = db.execute(sql, params).fetchall()
        # SQLite keeps the JSON list as text, PostgreSQL's jsonb arrives decoded
        return [
            (str(uuid.UUID(str(i))), s, w if isinstance(w, list) else json.loads(w))
            for i, s, w in found
        ]

    def wait_status(
        self, task: str, result_id: str, statuses: set[str], timeout: float = 30
    ) -> tuple[str, str, list[str]]:
        """Wait until result ``result_id`` has one of ``statuses``; its row."""
        deadline = time.monotonic() + timeout
        while True:
            row = next((r for r in self.rows(task) if r[0] == result_id), None)
            if row is not None and row[1] in statuses:
                return row
            assert time.monotonic() < deadline, f"{task} {result_id}: {row}"
            time.sleep(0.05)

    def runs(self, name: str, order_id: int) -> int:
        """How many times the body ``name`` ran for ``order_id``."""
        path = self.folder / f"{name}-{order_id}.log"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def settled_runs(self, name: str, order_id: int, want: int, wait: float = 0.5) -> int:
        """The run count once it reached ``want`` and stayed there ``wait`` seconds (extra
        runs of duplicates would show up meanwhile)."""
        deadline = time.monotonic() + 30
        while self.runs(name, order_id) < want and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(wait)
        return self.runs(name, order_id)

    def check_a_storm_runs_once(self, task: str, threads: int) -> None:
        """``threads`` callers enqueue ``task`` for one new order at once: each gets the first
        call's result id, one task row is stored, and the body runs once."""
        order = random.randrange(10**6, 10**7)
        ids = self.enqueue(task, order, threads=threads)
        assert len(ids) == threads
        assert len(set(ids)) == 1, f"every caller must get the first call's result id: {ids}"
        assert [r[0] for r in self.rows(task)] == ids[:1], "exactly one task row"
        self.wait_status(task, ids[0], {"SUCCESSFUL"})
        assert self.settled_runs(task, order, 1) == 1


@pytest.fixture(scope="session")
def task_project(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> Iterator[TaskProject]:
    """The test project migrated on a database file, with three db_worker processes."""
    folder = tmp_path_factory.mktemp("djtasks")
    db = folder / "tasks.sqlite3"
    url = redis_server.url.rsplit("/", 1)[0] + "/7"
    env = {
        "PYTHONPATH": str(TESTS),
        "DJANGO_SETTINGS_MODULE": "djproject.settings",
        "DJPROJECT_DB": str(db),
        "DJPROJECT_LOCKKIT_URL": url,
        "DJTASKS_DIR": str(folder),
    }
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--run-syncdb", "-v", "0"],
        env={**os.environ, **env},
        check=True,
        timeout=120,
    )
    with TaskWorkers(env, folder, count=3) as workers:
        yield TaskProject(env, db, folder, workers, url)
