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
def test_sample_sends_one_sms_per_order(mode: str) -> None:
    flags = ["--embedded"] if mode == "embedded" else []
    # pytest-django exports the test project's settings module; a plain Celery app run from
    # the shell has none (Celery would set Django up for its worker otherwise).
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-m", "sample_projects.celery_sms", *flags],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=150, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exactly one SMS per order" in done.stdout
    assert "duplicates the worker logged" in done.stdout
