"""``python -m sample_projects.celery_sms`` ends with exactly one SMS per order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.mark.parametrize("mode", ["redis", "embedded"])
def test_sample_sends_one_sms_per_order(mode: str, tmp_path: Path) -> None:
    flags = ["--embedded"] if mode == "embedded" else []
    # pytest-django exports the test project's settings module; a plain Celery app run from
    # the shell has none (Celery would set Django up for its worker otherwise).
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    before = _listing(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "sample_projects.celery_sms", *flags],
        check=False, cwd=tmp_path, capture_output=True, text=True, timeout=150, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exactly one SMS per order" in done.stdout
    assert "duplicates the worker logged" in done.stdout
    # Everything the story writes (the filesystem broker's control folder too) goes to its
    # own temporary directory: nothing in the directory it was started from or in the repo.
    assert _listing(tmp_path) == set()
    assert _listing(ROOT) == before


def _listing(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.name not in {"__pycache__", ".pytest_cache"}}
