"""The django_shop sample, run as its README says, keeps every guarantee it prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parent.parent / "sample_projects" / "django_shop" / "run.py"


def test_the_sample_shop_runs_and_holds_its_guarantees(tmp_path: Path) -> None:
    env = {**os.environ, "LOCKKIT_URL": f"file://{tmp_path}/locks"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, str(RUN)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "unlocked" in done.stdout
    assert "LockMiddleware:  0 paid twice, 0 stock < 0" in done.stdout
    assert "10 sold, 0 left" in done.stdout
    assert "exit codes [0, 75]" in done.stdout
    assert "one Idempotency-Key: 1 payment" in done.stdout
    assert "retry replayed the same bytes: True" in done.stdout
