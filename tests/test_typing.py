"""The public signatures as type checkers see them (tests/typing/public_signatures.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_public_signatures_type_check() -> None:
    # The project's mypy settings (strict, warn_unused_ignores) apply; a cache of its own keeps
    # this run from racing the CI's own `mypy` run over the same cache directory.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache" / "typing-test"),
         "tests/typing/public_signatures.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
