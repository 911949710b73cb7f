"""The version matrix: the Python versions and framework versions lockkit promises.

``scripts/matrix`` runs every session; ``nox -l`` lists them; ``nox -s core-3.10 -- -x`` runs
one, with pytest arguments after ``--``.

- ``core``: every test outside the framework adapters, on each Python 3.10-3.13, with the
  newest redis-py, kazoo, psycopg and PyMySQL the Python takes (Django and pytest-django come
  along: the test fixtures of the PostgreSQL alias need them).
- ``oldest``: the adapter suites (Django, Flask, Celery) on Python 3.10 with the oldest versions
  the package declares: Django 4.2 LTS (without django.tasks, which needs 5.2), Flask 3.0,
  Celery 5.3, redis-py 5.0, kazoo 2.10, OpenTelemetry 1.30.
- ``newest``: the adapter suites on Python 3.13 with the newest releases (Django 6 with its
  built-in ``django.tasks``), resolved now rather than pinned, so a new release shows up here.
- ``django52``: lockkit_django on Django 5.2 LTS (Python 3.12).
The main suite (``scripts/test``: Python 3.11 and uv.lock's pins) is the fifth corner.
"""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
# tests/conftest.py loads the OpenTelemetry fixtures (the SDK's in-memory reader) in every run;
# `lockkit top` renders with rich.
TEST_TOOLS = ["pytest>=8", "pytest-timeout", "pytest-xdist", "pytest-django>=4.9",
              "opentelemetry-sdk", "rich"]  # fmt: skip
# What the adapter tests drive: real servers (gunicorn, uvicorn), Flask-Login, the FastAPI
# example, a real browser for the admin page (chromium through selenium).
ADAPTER_TOOLS = ["gunicorn", "uvicorn", "asgiref", "Flask-Login", "selenium", "fastapi", "httpx"]
ADAPTER_TESTS = ["tests/test_django_*.py", "tests/test_flask_*.py", "tests/test_celery_*.py",
                 "tests/test_fastapi_example.py"]  # fmt: skip
#: django.tasks (the django-tasks extra) needs Django 5.2: the Django 4.2 run leaves it out.
OLDEST = [
    "Django==4.2.*",
    "Flask==3.0.*",
    "celery==5.3.*",
    # kombu's newest Redis transport refuses redis-py 5.0: the kombu of Celery 5.3's time
    "kombu==5.3.*",
    "redis==5.0.*",
    "kazoo==2.10.*",
    "psycopg[binary]==3.3.*",
    "PyMySQL==1.1.*",
    # the otel extra's floor (older APIs refuse the histograms' bucket advisory)
    "opentelemetry-api==1.30.*",
    "opentelemetry-sdk==1.30.*",
]


def _xdist() -> list[str]:
    """Two pytest-xdist workers, one test module each (scripts/_xdist.sh)."""
    workers = os.environ.get("LOCKKIT_TEST_WORKERS", "2")
    return ["-p", "no:cacheprovider", "-n", workers, "--dist", "loadfile"]


def _core_tests() -> list[str]:
    adapters = ("test_django_", "test_flask_", "test_celery_", "test_fastapi_")
    names = sorted(os.listdir("tests"))
    tests = [n for n in names if n.startswith("test_") and n.endswith(".py")]
    return [f"tests/{n}" for n in tests if not n.startswith(adapters)]


#: ``nox -s ... -- fast``: the modules CI runs on the other corners of the matrix (scripts/test),
#: one or two per area, that cover what differs between versions (imports, typing, the
#: frameworks' APIs) in a minute or two instead of the whole suite.
FAST = {
    "tests/test_units.py", "tests/test_bad_input.py", "tests/test_bad_input_everywhere.py",
    "tests/test_cli.py",
    "tests/test_contract_memory.py", "tests/test_contract_file.py",
    "tests/test_contract_redis.py", "tests/test_async_api.py", "tests/test_docs_examples.py",
    "tests/test_memory_backend.py", "tests/test_file_queue.py", "tests/test_redis_backend.py",
    "tests/test_guard.py", "tests/test_option_sources.py",
    "tests/test_django_settings.py", "tests/test_django_views.py",
    "tests/test_django_async_views.py",
    "tests/test_django_middleware.py", "tests/test_django_tasks.py", "tests/test_django_shop.py",
    "tests/test_flask_routes.py", "tests/test_flask_route_shapes_and_losses.py",
    "tests/test_flask_extension.py", "tests/test_flask_cli.py",
    "tests/test_celery_config.py", "tests/test_celery_keys.py", "tests/test_celery_worker.py",
}  # fmt: skip


def _pytest(session: nox.Session, tests: list[str]) -> None:
    """Run pytest on ``tests``; ``session.posargs``: files instead, ``fast`` for the FAST
    modules among them, and pytest options."""
    named = [a for a in session.posargs if a.startswith("tests/")]
    options = [a for a in session.posargs if not a.startswith("tests/") and a != "fast"]
    if "fast" in session.posargs:
        tests = [t for t in tests if t in FAST]
    session.run("python", "-m", "pytest", *_xdist(), *(named or tests), *options,
                external=False)  # fmt: skip


@nox.session(python=PYTHONS)
def core(session: nox.Session) -> None:
    """The core suite on one Python: stores, contract, asyncio, CLI, typing, docs examples."""
    # The test project (tests/djproject) loads django-tasks-db (and the backport before Django
    # 6); a few core tests (pickling every error, the CLI) import the adapters too.
    # tests/test_typing.py runs mypy over the packages, which import Django: its stubs too.
    session.install("-e", ".[redis,zookeeper,postgresql,mysql,django-tasks,flask,celery]", "mypy",
                    "django-stubs", *TEST_TOOLS)  # fmt: skip
    _pytest(session, _core_tests())


@nox.session(python="3.10")
def oldest(session: nox.Session) -> None:
    """The adapter suites on the oldest versions the package declares."""
    session.install("-e", ".[redis,zookeeper,postgresql,mysql]", *OLDEST, *TEST_TOOLS,
                    *ADAPTER_TOOLS)  # fmt: skip
    session.run("python", "-c", _VERSIONS, silent=False)
    without_tasks = [t for t in _globbed(ADAPTER_TESTS) if not t.startswith(_TASK_TESTS)]
    _pytest(session, without_tasks)


#: lockkit_django.tasks' tests: they need django.tasks (Django 5.2+), not run on Django 4.2
_TASK_TESTS = ("tests/test_django_tasks", "tests/test_celery_django")


@nox.session(python="3.13")
def newest(session: nox.Session) -> None:
    """The adapter suites on the newest releases, Django 6's own django.tasks included."""
    session.install("-e", ".[redis,zookeeper,postgresql,mysql,celery,flask]", "Django>=6",
                    "django-tasks-db", *TEST_TOOLS, *ADAPTER_TOOLS)  # fmt: skip
    session.run("python", "-c", _VERSIONS, silent=False)
    _pytest(session, _globbed(ADAPTER_TESTS))


@nox.session(python="3.12")
def django52(session: nox.Session) -> None:
    """lockkit_django on Django 5.2 LTS with the django-tasks backport."""
    session.install("-e", ".[redis,zookeeper,postgresql,mysql,celery]", "Django==5.2.*",
                    "django-tasks", "django-tasks-db", *TEST_TOOLS, *ADAPTER_TOOLS)  # fmt: skip
    session.run("python", "-c", _VERSIONS, silent=False)
    _pytest(session, _globbed(["tests/test_django_*.py", "tests/test_celery_django.py"]))


def _globbed(patterns: list[str]) -> list[str]:
    import glob

    return sorted({path for pattern in patterns for path in glob.glob(pattern)})


#: prints the versions a session runs, for the matrix table
_VERSIONS = """
import sys
from importlib import metadata
names = ["Django", "django-tasks", "Flask", "celery", "redis", "kazoo", "psycopg",
         "opentelemetry-sdk"]
found = []
for name in names:
    try:
        found.append(f"{name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        pass
print("versions: Python", sys.version.split()[0] + ",", ", ".join(found))
"""
