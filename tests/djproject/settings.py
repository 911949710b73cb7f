"""Settings of the Django project the lockkit_django tests (and their gunicorn server) run."""

from __future__ import annotations

import os
import sys
from importlib.util import find_spec

import django

SECRET_KEY = "lockkit-tests-only"
DEBUG = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "djproject.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    # Django 6 has django.tasks built in; Django 5.2 runs the django-tasks backport's app. The
    # task database backend needs Django 5.2+: the Django 4.2 run of the version matrix
    # (noxfile.py, session "oldest") has neither and leaves the django.tasks tests out.
    *([] if find_spec("django.tasks") or not find_spec("django_tasks") else ["django_tasks"]),
    *(["django_tasks_db"] if find_spec("django_tasks_db") else []),
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "lockkit_django",
    "djproject",
]
MIDDLEWARE = [
    "djproject.async_views.LoopWatchMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "lockkit_django.middleware.IdempotencyMiddleware",
    "lockkit_django.middleware.LockMiddleware",
]

# The admin, for lockkit_django's lock page.
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJPROJECT_DB", ":memory:"),
        # Two worker processes write: wait for the database lock instead of failing
        # (transaction_mode exists from Django 5.1; the Django 4.2 matrix run goes without).
        "OPTIONS": {
            "timeout": 30,
            **({"transaction_mode": "IMMEDIATE"} if django.VERSION >= (5, 1) else {}),
        },
    },
    # A real PostgreSQL: the test session fills this in from its own server
    # (tests/postgres_fixtures.py); processes the tests start get it through the environment.
    "pg": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": os.environ.get("DJPROJECT_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("DJPROJECT_PG_PORT", "5432"),
        "USER": os.environ.get("DJPROJECT_PG_USER", "lockkit"),
        "PASSWORD": "",
        "NAME": os.environ.get("DJPROJECT_PG_NAME", "lockkit"),
        "TEST": {"NAME": "test_lockkit", "DEPENDENCIES": []},
    },
    # A real MariaDB (the ``my`` alias, added below) and a SQLite file (``lite``), for the fenced
    # writes on each database (tests/mariadb_fixtures.py fills them in).
    "lite": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": "lite.sqlite3",
        "OPTIONS": {"timeout": 30},
        # The test database is a file (not SQLite's default :memory:), so that a lock store
        # on another connection (django://lite) sees it.
        "TEST": {"NAME": "lite-test.sqlite3", "DEPENDENCIES": [], "MIGRATE": False},
    },
}

# The ``my`` alias lives only in the test session's own process, where a fixture points it at a
# real MariaDB. Processes the tests start (manage.py commands, db_worker) run Django's system
# checks, which on Django 6.1 ask every MySQL alias for its server version; with no server
# behind ``my`` there, they would fail before doing their work.
if find_spec("pymysql") and "pytest" in sys.modules:
    import pymysql

    pymysql.install_as_MySQLdb()
    DATABASES["my"] = {
        "ENGINE": "django.db.backends.mysql",
        "HOST": "127.0.0.1",
        "PORT": "3306",
        "USER": "lockkit",
        "PASSWORD": "",
        "NAME": "lockkit",
        # Tables made from the models, not by migrations: django_tasks_db's migration 0019
        # inspects its table on every alias, which MariaDB answers with an error where the
        # router kept the table away (PostgreSQL and SQLite answer with nothing).
        "TEST": {"NAME": "test_lockkit", "DEPENDENCIES": [], "MIGRATE": False},
    }

# DJPROJECT_DEFAULT=pg: the project's own database is the PostgreSQL the ``pg`` alias names
# (the dedupe tests on ``django://default`` with the task rows and leases on PostgreSQL).
if os.environ.get("DJPROJECT_DEFAULT") == "pg":
    DATABASES["default"] = {**DATABASES["pg"], "OPTIONS": {}}

# The pg alias holds no task tables (see routers.py).
DATABASE_ROUTERS = ["djproject.routers.TasksOnDefault"]

# lockkit_django.tasks' tests: tasks stored in this database, run by real db_worker processes.
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

LOCKKIT = {
    "URL": os.environ.get("DJPROJECT_LOCKKIT_URL", "memory://djproject"),
    # The slow-reader test runs a server of its own with a short one.
    "STREAM_MAX_HOLD": float(os.environ.get("DJPROJECT_STREAM_MAX_HOLD", "60")),
    "MIDDLEWARE": {
        "RULES": [
            {
                "PATH": r"^/mw/orders/(?P<order_id>\d+)/pay/$",
                "METHODS": ["POST"],
                "KEY": "order:{order_id}",
            },
            {"PATH": r"^/mw/aoverlap/(?P<name>\w+)/$", "KEY": "aoverlap-mw:{name}"},
        ]
    },
    # Idempotency-Key through the middleware on /mw-idem/; @idempotent views elsewhere.
    "IDEMPOTENCY": {"PATHS": [r"^/mw-idem/"], "CACHE": "idempotency"},
}


def _idempotency_cache(location: str) -> dict[str, str]:
    """DJPROJECT_CACHE: a redis:// URL (Django's RedisCache), a directory (FileBasedCache), or
    unset (this process's memory)."""
    if location.startswith("redis://"):
        return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": location}
    if location:
        backend = "django.core.cache.backends.filebased.FileBasedCache"
        return {"BACKEND": backend, "LOCATION": location}
    return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}


CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "idempotency": _idempotency_cache(os.environ.get("DJPROJECT_CACHE", "")),
}
SILENCED_SYSTEM_CHECKS = ["lockkit.W001", "lockkit.W004", "lockkit.W006"]
