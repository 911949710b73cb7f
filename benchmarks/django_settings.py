"""Settings of the tiny Django project that ``benchmarks.django_middleware`` measures.

No database, no sessions, no other middleware: only what a request costs in Django itself
and what ``LockMiddleware`` adds to it. ``BENCH_LOCK_MIDDLEWARE=0`` leaves the middleware
out (the baseline); ``BENCH_LOCKKIT_URL`` is the lock store. Three rules, as a site would
have a few: the benchmark's ``/locked/<n>`` route matches the last one, ``/plain/<n>``
matches none, so the no-rule path tries every rule.
"""

from __future__ import annotations

import os
import tempfile

SECRET_KEY = "lockkit-benchmark-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "benchmarks.django_urls"
USE_TZ = True
USE_I18N = False
DATABASES: dict[str, dict[str, str]] = {}
INSTALLED_APPS = ["lockkit_django"]

LOCK_MIDDLEWARE = "lockkit_django.middleware.LockMiddleware"
MIDDLEWARE = [LOCK_MIDDLEWARE] if os.environ.get("BENCH_LOCK_MIDDLEWARE", "1") == "1" else []


def lockkit_settings(url: str) -> dict[str, object]:
    """``LOCKKIT`` for the benchmark, locking on ``url``."""
    return {
        "URL": url,
        "NAMESPACE": "bench",
        "MIDDLEWARE": {
            "RULES": [
                {"PATH": r"^/orders/(?P<order_id>\d+)/pay$", "METHODS": ["POST"],
                 "KEY": "order:{order_id}"},
                {"PATH": r"^/carts/(?P<cart_id>\d+)/checkout$", "KEY": "cart:{cart_id}"},
                {"PATH": r"^/locked/(?P<n>\d+)$", "KEY": "bench:{n}"},
            ]
        },
    }  # fmt: skip


LOCKKIT = lockkit_settings(
    os.environ.get("BENCH_LOCKKIT_URL", f"file://{tempfile.gettempdir()}/lockkit-bench-django")
)
