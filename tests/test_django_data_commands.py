"""Django's data commands work with ``lockkit_django`` installed: ``dumpdata``, ``loaddata``,
``flush`` and ``sqlflush``, each run as ``python -m django ...`` on the test project against a
real SQLite file migrated by ``migrate``. The app's ``Lock`` model has no table (the locks live
in the lock store), so none of them may query one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def database(tmp_path: Path) -> Path:
    db = tmp_path / "db.sqlite3"
    django("migrate", "--run-syncdb", "--noinput", db=db)  # djproject has no migrations
    return db


def django(*args: str, db: Path) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": str(TESTS),
        "DJANGO_SETTINGS_MODULE": "djproject.settings",
        "DJPROJECT_DB": str(db),
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


def test_dumpdata_of_the_whole_project_skips_the_lock_model(database: Path) -> None:
    django("shell", "-c", _MAKE_GROUP, db=database)
    for extra in ([], ["--all"]):
        objects = json.loads(django("dumpdata", *extra, db=database))
        models = {obj["model"] for obj in objects}
        assert "auth.group" in models  # the dump is real
        assert not any(model.startswith("lockkit") for model in models)
    assert json.loads(django("dumpdata", "lockkit", db=database)) == []


def test_loaddata_and_flush_round_trip(database: Path, tmp_path: Path) -> None:
    django("shell", "-c", _MAKE_GROUP, db=database)
    fixture = tmp_path / "dump.json"
    fixture.write_text(django("dumpdata", "auth.group", db=database))
    flushed = django("sqlflush", db=database)
    assert "auth_group" in flushed and "lockkit" not in flushed
    django("flush", "--noinput", db=database)
    assert json.loads(django("dumpdata", "auth.group", db=database)) == []
    assert "Installed 1 object" in django("loaddata", str(fixture), db=database)
    names = [
        obj["fields"]["name"] for obj in json.loads(django("dumpdata", "auth.group", db=database))
    ]
    assert names == ["operators"]


_MAKE_GROUP = "from django.contrib.auth.models import Group; Group.objects.create(name='operators')"
