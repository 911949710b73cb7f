"""Session fixtures: the test project (tests/djproject) under real multi-process servers.

* ``djproject_gunicorn``: gunicorn, 2 workers x 4 gthread threads, once with file:// locks and
  Django's FileBasedCache, once with a real redis-server holding locks and responses.
* ``djproject_uvicorn``: uvicorn, 2 worker processes (each its own event loop), file:// locks.

They share one SQLite database file, migrated once, and are stopped at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lockkit_core.testing import Gunicorn, RedisServer, Uvicorn, http_call

TESTS = Path(__file__).resolve().parent


@dataclass
class DjangoServer:
    """A running test project: its port, settings environment and data directory."""

    port: int
    env: dict[str, str]
    data: Path
    lock_url: str

    def pids(self, path: str = "/aping", want: int = 2, tries: int = 200) -> set[int]:
        """The worker pids seen answering ``path`` (stops once ``want`` are seen)."""
        import json

        seen: set[int] = set()
        for _ in range(tries):
            seen.add(json.loads(http_call(self.port, "GET", path)[2])["pid"])
            if len(seen) >= want:
                break
        return seen


@pytest.fixture(scope="session")
def djproject_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite database file for every server of the session (tests use names of
    their own, so they share it)."""
    db = tmp_path_factory.mktemp("djproject") / "db.sqlite3"
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--run-syncdb", "-v", "0"],
        env={**os.environ, "PYTHONPATH": str(TESTS), "DJPROJECT_DB": str(db),
             "DJANGO_SETTINGS_MODULE": "djproject.settings"},
        check=True,
        timeout=120,
    )  # fmt: skip
    return db


def _project_env(db: Path, data: Path, lock_url: str, cache: str) -> dict[str, str]:
    return {
        "PYTHONPATH": str(TESTS),
        "DJANGO_SETTINGS_MODULE": "djproject.settings",
        "DJPROJECT_DB": str(db),
        "DJPROJECT_LOCKKIT_URL": lock_url,
        "DJPROJECT_CACHE": cache,
        "DJPROJECT_OVERLAP_DIR": str(data),
        "DJPROJECT_LOOPWATCH": "1",
    }


@pytest.fixture(scope="session", params=["file", pytest.param("redis", marks=pytest.mark.redis)])
def djproject_gunicorn(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, djproject_db: Path
) -> Iterator[DjangoServer]:
    """The test project under gunicorn (2 workers x 4 threads) on file:// or redis://."""
    data = tmp_path_factory.mktemp(f"gunicorn-{request.param}")
    if request.param == "file":
        lock_url, cache = f"file://{data}/locks", str(data / "responses")
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        lock_url = cache = server.url
    env = _project_env(djproject_db, data, lock_url, cache)
    with Gunicorn("djproject.wsgi:application", env, log_dir=str(data)) as web:
        yield DjangoServer(web.port, env, data, lock_url)


@pytest.fixture(scope="session")
def djproject_uvicorn(
    tmp_path_factory: pytest.TempPathFactory, djproject_db: Path
) -> Iterator[DjangoServer]:
    """The test project under uvicorn with 2 worker processes, locks on file://."""
    data = tmp_path_factory.mktemp("uvicorn")
    lock_url = f"file://{data}/locks"
    env = _project_env(djproject_db, data, lock_url, str(data / "responses"))
    with Uvicorn("djproject.asgi:application", env, workers=2, log_dir=str(data)) as web:
        yield DjangoServer(web.port, env, data, lock_url)
