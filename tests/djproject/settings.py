"""Settings of the Django project the lockkit_django tests (and their gunicorn server) run."""

from __future__ import annotations

import os

SECRET_KEY = "lockkit-tests-only"
DEBUG = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "djproject.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "lockkit_django",
    "djproject",
]
MIDDLEWARE = [
    "djproject.async_views.LoopWatchMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "lockkit_django.middleware.IdempotencyMiddleware",
    "lockkit_django.middleware.LockMiddleware",
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJPROJECT_DB", ":memory:"),
        # Two worker processes write: wait for the database lock instead of failing.
        "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"},
    }
}

LOCKKIT = {
    "URL": os.environ.get("DJPROJECT_LOCKKIT_URL", "memory://djproject"),
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
SILENCED_SYSTEM_CHECKS = ["lockkit.W001", "lockkit.W004"]
