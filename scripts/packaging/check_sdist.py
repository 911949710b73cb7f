"""scripts/check-dist's look inside the built files.

``check_sdist.py SDIST WHEEL``: the sdist carries LICENSE, CHANGELOG.md, py.typed and the package
data, and a wheel built from it holds the same files as WHEEL.
``check_sdist.py --extras WHEEL``: print the extras WHEEL declares, one a line.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

NEEDED_IN_SDIST = ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml")
NEEDED_IN_WHEEL = (
    "lockkit_core/py.typed",
    "lockkit_django/py.typed",
    "lockkit_flask/py.typed",
    "lockkit_celery/py.typed",
    "lockkit_core/backends/redis/lua/lock.lua",
    "lockkit_core/backends/redis/lua/runs.lua",
    "lockkit_django/templates/lockkit_django/admin/",
)


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {n for n in zf.namelist() if ".dist-info/" not in n}


def extras(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(zf.read(meta).decode())
    return message.get_all("Provides-Extra") or []


def check(sdist: Path, wheel: Path) -> list[str]:
    problems = []
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    problems += [f"the sdist lacks {n}" for n in NEEDED_IN_SDIST if n not in names]
    files = wheel_files(wheel)
    for needed in NEEDED_IN_WHEEL:
        if not any(f.startswith(needed) for f in files):
            problems.append(f"the wheel lacks {needed}")
    licensed = any(n.endswith("LICENSE") for n in zipfile.ZipFile(wheel).namelist())
    if not licensed:
        problems.append("the wheel carries no LICENSE")
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", out, str(sdist)],
            check=True, capture_output=True,
        )  # fmt: skip
        rebuilt = wheel_files(next(Path(out).glob("*.whl")))
    if rebuilt != files:
        problems.append(f"a wheel built from the sdist differs: {sorted(rebuilt ^ files)}")
    return problems


def main() -> int:
    if sys.argv[1] == "--extras":
        print("\n".join(extras(Path(sys.argv[2]))))
        return 0
    problems = check(Path(sys.argv[1]), Path(sys.argv[2]))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
