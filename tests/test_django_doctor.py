"""``manage.py check --deploy`` runs ``lockkit doctor`` on the configured store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from django.test import override_settings
from djchecks import run_checks

from lockkit_core.testing import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def evicting_redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        with redis.Redis(port=server.port) as client:
            client.config_set("maxmemory-policy", "allkeys-lru")
        yield server


def test_deploy_check_reports_an_evicting_store(evicting_redis: RedisServer) -> None:
    with override_settings(LOCKKIT={"URL": evicting_redis.url}):
        plain = [m for m in run_checks() if m.id and m.id.startswith("lockkit.")]
        assert plain == []  # the doctor runs only with --deploy
        found = {
            m.id: m for m in run_checks(include_deployment_checks=True) if m.id in {"lockkit.E007"}
        }
    assert "lockkit.E007" in found
    message = found["lockkit.E007"]
    assert "maxmemory-policy" in message.msg and "allkeys-lru" in message.msg
    assert message.hint is not None and "noeviction" in message.hint
