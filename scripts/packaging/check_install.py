"""Run by scripts/check-dist inside a clean venv holding the wheel (and one extra): every lockkit
module the installed packages make usable imports, the `lockkit` command runs, a backend whose
driver is missing names its extra, and the entry points load without side effects.

``check_install.py EXTRA`` ("" for the bare install). Needs no lockkit checkout: it runs from
an empty directory, so only the installed wheel can be imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from importlib.metadata import entry_points
from pathlib import Path

PACKAGES = ("lockkit_core", "lockkit_django", "lockkit_flask", "lockkit_celery")

#: modules each extra promises to make importable (besides lockkit_core)
PROMISED = {
    "": ["lockkit_core", "lockkit_core.backends.file", "lockkit_core.backends.memory"],
    "redis": ["lockkit_core.backends.redis"],
    "zookeeper": ["lockkit_core.backends.zookeeper"],
    "etcd": ["lockkit_core.backends.etcd"],
    "postgresql": ["lockkit_core.backends.sql.postgres"],
    "mysql": ["lockkit_core.backends.sql.mysql"],
    "django": ["lockkit_django", "lockkit_django.middleware", "lockkit_django.views"],
    "django-tasks": ["lockkit_django.tasks"],
    "flask": ["lockkit_flask", "lockkit_flask.cli"],
    "celery": ["lockkit_celery", "lockkit_celery.cli"],
    "otel": ["lockkit_core.observe"],
    "docs": [],
}


def setup_django() -> None:
    """Django's app registry must be ready before lockkit_django's models import."""
    if importlib.util.find_spec("django") is None:
        return
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django.contrib.sessions",
            "django.contrib.messages",
            "django.contrib.admin",
            "lockkit_django",
        ],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        LOCKKIT={"URL": "memory://"},
    )
    django.setup()


def import_all() -> tuple[set[str], dict[str, str], dict[str, str]]:
    """Import every module of every lockkit package: (imported, missing-dependency, broken).

    A module whose import stops at a third-party package that is not installed is "missing"
    (an extra would bring it); any other failure is "broken"."""
    imported: set[str] = set()
    missing: dict[str, str] = {}
    broken: dict[str, str] = {}

    def attempt(name: str) -> bool:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            if top and top not in PACKAGES:
                missing[name] = top
            else:
                broken[name] = traceback.format_exc()
            return False
        except ImportError as exc:
            # lockkit's own "install the extra" errors (lockkit_django.tasks without a task
            # framework) name what is missing; any other ImportError is a broken module.
            if 'pip install "lockkit[' in str(exc):
                missing[name] = str(exc).rsplit("lockkit[", 1)[1].split("]")[0]
            else:
                broken[name] = traceback.format_exc()
            return False
        except Exception:
            broken[name] = traceback.format_exc()
            return False
        imported.add(name)
        return True

    for package in PACKAGES:
        if not attempt(package):
            continue
        # Every .py file, not pkgutil.walk_packages: lockkit_core.backends is a namespace
        # package (no __init__.py), which pkgutil does not descend into.
        root = Path(importlib.import_module(package).__file__ or "").parent
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if name != package and "migrations" not in parts:
                attempt(name)
    return imported, missing, broken


def check_entry_points(extra: str, problems: list[str]) -> None:
    """`lockkit --help` runs; `flask --help` / `celery --help` in an app that does not use
    lockkit list its command group and leave nothing behind (no store directory, no output
    on stderr)."""
    bindir = Path(sys.executable).parent
    temp = Path(tempfile.mkdtemp())
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONWARNINGS": "default"}
    runs = [[str(bindir / "lockkit"), "--help"]]
    app = temp / "plainapp.py"
    if importlib.util.find_spec("flask") is not None:
        app.write_text("from flask import Flask\napp = Flask(__name__)\n")
        runs.append([str(bindir / "flask"), "--app", str(app), "--help"])
    if importlib.util.find_spec("celery") is not None:
        runs.append([str(bindir / "celery"), "--help"])
    for args in runs:
        done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=temp, check=False)
        name = Path(args[0]).name
        if done.returncode != 0:
            problems.append(f"`{name} --help` exited {done.returncode}: {done.stderr[-800:]}")
        elif name != "lockkit" and "lockkit" not in done.stdout:
            problems.append(f"`{name} --help` does not list the lockkit command group")
        if done.stderr.strip():
            problems.append(f"`{name} --help` wrote to stderr: {done.stderr[-800:]}")
    left = [p.name for p in temp.iterdir() if p != app]
    if left:
        problems.append(f"loading the entry points left files behind: {left}")
    shutil.rmtree(temp)
    # Each framework loads its group only when it is installed; then the entry point must load.
    for group, framework in (("flask.commands", "flask"), ("celery.commands", "celery")):
        if importlib.util.find_spec(framework) is None:
            continue
        for ep in entry_points(group=group):
            if ep.value.startswith(PACKAGES):
                try:
                    ep.load()
                except Exception as exc:
                    problems.append(f"entry point {group}:{ep.name} fails to load: {exc!r}")


def check_missing_driver(problems: list[str]) -> None:
    """Without redis-py, a redis:// URL is BackendNotInstalled naming the extra."""
    if importlib.util.find_spec("redis") is not None:
        return
    from lockkit_core import LockKit
    from lockkit_core.errors import BackendNotInstalled

    try:
        LockKit("redis://127.0.0.1:1/0")
    except BackendNotInstalled as exc:
        if "lockkit[redis]" not in str(exc):
            problems.append(f"BackendNotInstalled does not name the extra: {exc}")
    else:
        problems.append("redis:// without redis-py did not raise BackendNotInstalled")


def main() -> int:
    extra = sys.argv[1] if len(sys.argv) > 1 else ""
    setup_django()
    imported, missing, broken = import_all()
    problems = [f"{name} fails to import:\n{tb}" for name, tb in broken.items()]
    promised = [m for e, mods in PROMISED.items() for m in mods] if extra == "all" else []
    promised += PROMISED.get(extra, []) + PROMISED[""]
    if extra == "all":
        promised = [m for m in promised if not m.startswith("lockkit_core.observe")]
    for name in promised:
        if name not in imported:
            why = f"needs {missing[name]}" if name in missing else "not found"
            problems.append(f"lockkit[{extra}] should make {name} importable ({why})")
    check_entry_points(extra, problems)
    check_missing_driver(problems)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    skipped = sorted({dep for dep in missing.values()})
    print(f"  {len(imported)} modules imported; left out for lack of {skipped or 'nothing'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
