"""The worker's startup check and ``celery lockkit ...`` on a real Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from celery import Celery

from lockkit_celery import check_app, locked_task
from lockkit_core.testing import RedisServer

HERE = Path(__file__).resolve().parent


def _app(**conf: object) -> Celery:
    app = Celery("check_test", broker="redis://127.0.0.1:1/0", set_as_current=False)
    app.conf.update(conf)

    @locked_task(app=app, name="check_sms", unique_on=["order_id"], acks_late=True, shared=False)
    def sms(order_id: int) -> None: ...

    return app


def test_consistent_settings_pass() -> None:
    app = _app(lockkit_url="memory://check", task_time_limit=600)
    assert check_app(app) == []


def test_time_limit_over_visibility_timeout_names_the_setting() -> None:
    app = _app(
        lockkit_url="memory://check",
        task_time_limit=7200,
        broker_transport_options={"visibility_timeout": 3600},
    )
    # Tasks other test modules declared with Celery's default shared=True join every app.
    (problem,) = [p for p in check_app(app) if "check_sms" in p]
    assert "visibility_timeout" in problem and "task check_sms" in problem


def test_ttl_over_visibility_timeout_names_lockkit_ttl() -> None:
    app = _app(
        lockkit_url="memory://check",
        lockkit_ttl=120,
        lockkit_enqueue_ttl=600,
        broker_transport_options={"visibility_timeout": 60},
    )
    assert any("lower lockkit_ttl" in p for p in check_app(app))


def test_default_file_store_warns() -> None:
    from django.test import override_settings

    with override_settings(LOCKKIT={}):  # no Django store to fall back on either
        problems = check_app(_app())
    assert any("PrivateTmp" in p and "lockkit_url" in p for p in problems)


@pytest.mark.redis
def test_celery_lockkit_list_info_release(redis_server: RedisServer) -> None:
    base = redis_server.url.rsplit("/", 1)[0]
    os.environ.setdefault("LOCKKIT_TEST_REDIS", base)
    import celery_app

    from lockkit_celery import kit_for

    kit = kit_for(celery_app.app)
    lock = kit.lock("task:cli:1", ttl=30, reentrant=False)
    assert lock.acquire(blocking=False, timeout=0)
    env = {**os.environ, "LOCKKIT_TEST_REDIS": celery_app.BASE, "PYTHONPATH": str(HERE)}

    def celery(*words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "celery", "-A", "celery_app", "lockkit", *words],
            check=False, cwd=HERE, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    listed = celery("list", "task:cli:")
    assert listed.returncode == 0, listed.stderr
    assert "task:cli:1" in listed.stdout
    assert "task:cli:1" in celery("info", "task:cli:1").stdout
    assert celery("release", "task:cli:1").returncode != 0  # needs --force
    released = celery("release", "task:cli:1", "--force")
    assert released.returncode == 0, released.stderr
    assert kit.admin.info("task:cli:1") is None
