"""django_shop settings. ``LOCKKIT_URL`` picks the lock store (default: lockkit's file://
under the system temp dir); ``SHOP_DATA_DIR`` holds the SQLite database."""

from __future__ import annotations

import os
from pathlib import Path

import django

DATA_DIR = Path(os.environ.get("SHOP_DATA_DIR", Path(__file__).resolve().parent.parent))

SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "django-shop-sample-only")
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "shop.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "lockkit_django",
    "shop",
]
MIDDLEWARE = [
    "lockkit_django.middleware.IdempotencyMiddleware",
    "lockkit_django.middleware.LockMiddleware",
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DATA_DIR / "shop.sqlite3",
        # Workers write at once: wait for SQLite's lock rather than fail. transaction_mode
        # is Django 5.1's; on Django 4.2 the timeout alone waits.
        "OPTIONS": {
            "timeout": 30,
            **({"transaction_mode": "IMMEDIATE"} if django.VERSION >= (5, 1) else {}),
        },
    }
}

# Refused duplicates (409) and sold-out answers (410) are expected here; Django would log
# each one as a warning.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django.request": {"level": "ERROR"}},
}

LOCKKIT = {
    "NAMESPACE": "shop",
    "MIDDLEWARE": {
        "RULES": [
            # The double-clicked pay button: one payment per order at a time.
            {
                "PATH": r"^/orders/(?P<order_id>\d+)/pay/$",
                "METHODS": ["POST"],
                "KEY": "order:{order_id}",
            }
        ]
    },
    # A retried pay request with the same Idempotency-Key gets the first answer again, and
    # the card is charged once. The shop has no logins: X-Customer names the caller.
    "IDEMPOTENCY": {
        "PATHS": [r"^/orders/\d+/pay/$"],
        "METHODS": ["POST"],
        "EXPIRES": 24 * 3600,
        "SCOPE": "shop.views.customer",
    },
}
if os.environ.get("LOCKKIT_URL"):
    LOCKKIT["URL"] = os.environ["LOCKKIT_URL"]

# Kept responses must be shared by every worker process: a directory here, or Redis when
# the locks are on Redis.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
        "LOCATION": str(DATA_DIR / "cache"),
    }
}
if os.environ.get("LOCKKIT_URL", "").startswith("redis://"):
    CACHES["default"] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": os.environ["LOCKKIT_URL"],
    }
