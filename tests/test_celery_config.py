"""The Celery adapter's configuration: the one option set, unknown settings, the store under
Django, the startup check's brokers, hints that reach the same store, and a worker of an app
that does not use lockkit."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from celery import Celery
from django.test import override_settings

from lockkit_celery import TaskLocked, check_app, kit_for, locked_task
from lockkit_celery.settings import resolve, store_config
from lockkit_core import ConfigError, LockKit
from lockkit_core.testing import RedisServer

HERE = Path(__file__).resolve().parent


def _path() -> str:
    return os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)


def _app(name: str, **conf: object) -> Celery:
    app = Celery(name, broker="memory://", set_as_current=False)
    app.conf.update(conf)
    return app


def test_locked_task_takes_every_lock_option_and_refuses_unknown_ones() -> None:
    app = _app("options_test", lockkit_url="memory://options")

    @locked_task(app=app, name="opts_all", enabled=False, remember=7200, enqueue_ttl=50,
                 shared=False)  # fmt: skip
    def opts_all(order_id: int) -> None: ...

    opts = resolve(opts_all)
    assert (opts.enabled, opts.remember, opts.enqueue_ttl) == (False, 7200.0, 50.0)
    assert not hasattr(opts_all, "remember") and not hasattr(opts_all, "enqueue_ttl")
    with pytest.raises(ConfigError, match=r"remeber.*remember"):
        locked_task(app=app, name="typo", remeber=60, shared=False)(lambda order_id: None)
    with pytest.raises(ConfigError, match=r"enqueue_ttl"):
        locked_task(app=app, name="bad", enqueue_ttl=-1, shared=False)(lambda order_id: None)
    with pytest.raises(ConfigError, match=r"on_duplicate.*skip, retry, raise"):
        locked_task(app=app, name="bad2", on_duplicate="drop", shared=False)(lambda x: None)


def test_an_unknown_lockkit_setting_is_an_error_naming_the_known_ones() -> None:
    app = _app("typo_test", lockkit_url="memory://typo", lockkit_tll=5)

    @locked_task(app=app, name="typo_sms", shared=False)
    def typo_sms(order_id: int) -> None: ...

    problems = check_app(app)
    assert any("lockkit_tll" in p and "lockkit_ttl" in p for p in problems), problems
    with pytest.raises(ConfigError, match=r"lockkit_tll.*known.*lockkit_ttl"):
        kit_for(app)


def test_under_django_an_app_without_a_store_uses_django_s() -> None:
    app = _app("django_store_test")
    with override_settings(LOCKKIT={"URL": "memory://from-django", "TTL": 12, "TASKS": {}}):
        config = store_config(app)
    assert config.url == "memory://from-django"
    assert config.ttl == 12.0
    assert config.namespace == "celery"
    named = _app("own_store_test", lockkit_url="memory://own")
    with override_settings(LOCKKIT={"URL": "memory://from-django"}):
        assert store_config(named).url == "memory://own"


def test_a_duplicate_enqueue_says_how_long_until_the_lock_runs_out() -> None:
    app = _app("countdown_test", lockkit_url="memory://countdown")

    @locked_task(app=app, name="count_sms", enqueue_ttl=120, on_duplicate="raise", shared=False)
    def count_sms(order_id: int) -> None: ...

    first = count_sms.delay(1)
    with pytest.raises(TaskLocked) as refused:
        count_sms.delay(1)
    assert refused.value.task_id == first.id
    assert refused.value.countdown is not None and 100 < refused.value.countdown <= 120


def _rabbit(time_limit: int) -> Celery:
    app = Celery("rabbit_test", broker="amqp://guest@127.0.0.1:1//", set_as_current=False)
    app.conf.update(lockkit_url="memory://rabbit", task_time_limit=time_limit)

    @locked_task(app=app, name="rabbit_sms", acks_late=True, shared=False)
    def rabbit_sms(order_id: int) -> None: ...

    return app


def test_the_startup_check_knows_rabbitmq_s_consumer_timeout() -> None:
    problems = check_app(_rabbit(3600))
    assert any("consumer_timeout" in p and "rabbit_sms" in p for p in problems), problems
    assert check_app(_rabbit(600)) == []


@pytest.mark.redis
def test_release_without_force_names_the_celery_command_for_the_same_store(
    redis_server: RedisServer,
) -> None:
    base = redis_server.url.rsplit("/", 1)[0]
    env = {**os.environ, "LOCKKIT_TEST_REDIS": base, "PYTHONPATH": _path()}
    refused = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "celery_app", "lockkit", "release", "task:x:1"],
        check=False, cwd=HERE, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "celery -A celery_app lockkit release task:x:1 --force" in refused.stderr
    assert "'lockkit release" not in refused.stderr


NAMELESS_APP = """
from celery import Celery

app = Celery(broker="memory://", set_as_current=False)
app.conf.lockkit_url = "{url}"
"""


@pytest.mark.redis
def test_the_release_hint_of_an_app_without_a_main_name_reaches_its_store(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # Celery 5.3 hands the command the app object, not the -A text: the hint names the
    # module that holds the app, and running the hint frees the key on the app's own store.
    (tmp_path / "nameless_app.py").write_text(NAMELESS_APP.format(url=redis_server.url))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(tmp_path), _path()))}
    key = f"hint:{uuid.uuid4().hex[:8]}"
    kit = LockKit(redis_server.url, namespace="celery")  # the app's kit's default namespace
    held = kit.lock(key, ttl=60, auto_renew=False)
    assert held.acquire(timeout=5)
    try:

        def celery(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "celery", *args], check=False,
                                  cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=60)  # fmt: skip

        refused = celery("-A", "nameless_app", "lockkit", "release", key)
        assert refused.returncode != 0
        hint = re.search(r"Run 'celery (.*?)' if you mean it", refused.stderr)
        assert hint is not None, refused.stderr
        assert "<Celery" not in hint[1]
        forced = celery(*shlex.split(hint[1]))
        assert forced.returncode == 0, forced.stderr
        assert kit.admin.info(key) is None
    finally:
        kit.close()


@pytest.mark.redis
@pytest.mark.timeout(120)
def test_a_worker_of_an_app_without_lockkit_is_not_touched(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    base = redis_server.url.rsplit("/", 1)[0]
    env = {**os.environ, "LOCKKIT_TEST_REDIS": base, "PYTHONPATH": _path()}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    log = tmp_path / "plain.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_plain_app", "worker",
             "--pool=prefork", "--concurrency=1", "-l", "info", "--without-gossip",
             "--without-mingle", "--without-heartbeat", "-n", f"plain-{os.getpid()}@%h"],
            cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while b"ready." not in log.read_bytes():
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(20)
    text = log.read_text(errors="replace")
    assert "celery_plain_app" in text
    assert "lockkit" not in text.lower(), text


def test_a_task_argument_cannot_reach_another_call_s_dedupe_records() -> None:
    app = _app("forge_test", lockkit_url="memory://forge")

    @locked_task(app=app, name="forge_sms", key="sms:{order_id}", once=600, shared=False)
    def forge_sms(order_id: object) -> None: ...

    forged = forge_sms.delay("42:done")  # queued: its key is held until it runs
    real = forge_sms.delay(42)
    assert real.id != forged.id, "order 42 is queued, not skipped as done"
    with pytest.raises(ConfigError, match="task-record:"):
        forge_sms.apply_async(("x",), lockkit={"key": "task-record:run:abc"})


def test_a_misspelt_option_attribute_on_a_locked_task_class_is_an_error() -> None:
    from lockkit_celery import LockedTask

    app = _app("attr_test", lockkit_url="memory://attr")

    class Typo(LockedTask):  # type: ignore[misc]
        abstract = True
        lockkit_tll = 5

    @locked_task(app=app, name="attr_sms", base=Typo, shared=False)
    def attr_sms(order_id: int) -> None: ...

    with pytest.raises(ConfigError, match=r"lockkit_tll.*known.*lockkit_ttl"):
        attr_sms.delay(1)
