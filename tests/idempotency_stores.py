"""The stores the Django idempotency tests run on: file:// locks with Django's FileBasedCache,
and a real redis-server holding both the locks and the kept responses (RedisCache)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from lockkit_core.testing import RedisServer

#: ``params`` of a ``store`` fixture: each test runs once per store
STORES = ["file", pytest.param("redis", marks=pytest.mark.redis)]


@contextmanager
def idempotency_store(
    request: pytest.FixtureRequest, tmp_path: Path, prefix: str
) -> Iterator[dict[str, Any]]:
    """LOCKKIT and CACHES for the store ``request.param`` names, with a fresh namespace that
    starts with ``prefix`` (a scope of its own on the shared redis); yields the LOCKKIT mapping."""
    if request.param == "file":
        url = f"file://{tmp_path}/locks"
        cache = {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(tmp_path / "responses"),
        }
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        url = server.url
        cache = {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}
    lockkit = {
        "URL": url,
        "NAMESPACE": f"{prefix}-{time.monotonic_ns()}",
        "IDEMPOTENCY": {"PATHS": [r"^/mw-idem/"], "CACHE": "idempotency"},
    }
    caches = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with override_settings(LOCKKIT=lockkit, CACHES={**caches, "idempotency": cache}):
        from django.core.cache import caches as handler

        handler["idempotency"].clear()
        yield lockkit
