"""Two real ``celery beat`` processes with a BeatLock: one schedules, the other takes over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from lockkit_core import LockKit
from lockkit_core.testing import RedisServer

HERE = Path(__file__).resolve().parent

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


def _beat(base: str, workdir: Path, name: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LOCKKIT_TEST_REDIS": base, "PYTHONPATH": str(HERE)}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # a plain Celery beat, not Django's
    log = (workdir / f"{name}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_beat_app", "beat", "-l", "info",
         "-s", str(workdir / f"{name}-schedule")],
        cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def _sent(client: redis.Redis) -> int:
    return int(client.llen("beat-test"))


def test_one_beat_schedules_and_a_standby_takes_over(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    base = redis_server.url.rsplit("/", 1)[0]
    client = redis.Redis.from_url(f"{base}/4")
    client.delete("beat-test")
    beats = [_beat(base, tmp_path, "a"), _beat(base, tmp_path, "b")]
    try:
        # Both started (however loaded the machine) and one is scheduling.
        deadline = time.monotonic() + 60
        while not all("beat: Starting" in (tmp_path / f"{n}.log").read_text() for n in "ab"):
            assert time.monotonic() < deadline, "the beats never started"
            time.sleep(0.1)
        while _sent(client) == 0:
            assert time.monotonic() < deadline, "no beat ever sent a tick"
            time.sleep(0.1)
        time.sleep(1.0)
        start = _sent(client)
        time.sleep(5.0)
        both = _sent(client) - start
        # One beat sends a tick every 0.5 s: about 10 in 5 s; two would send about 20.
        assert 6 <= both <= 13, f"{both} ticks in 5 s"
        holder = next(
            b for b, name in zip(beats, "ab", strict=True)
            if "took the lock" in (tmp_path / f"{name}.log").read_text()
        )  # fmt: skip
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(5)
        time.sleep(4.0)  # the lock (ttl 2 s) runs out and the standby starts
        start = _sent(client)
        time.sleep(3.0)
        assert _sent(client) - start >= 3, "the standby beat did not take over"
        # A beat that loses its lock stops instead of scheduling beside a new holder.
        standby = next(b for b in beats if b is not holder)
        kit = LockKit(f"{base}/3", namespace="beattest")
        try:
            assert kit.admin.force_release("celery-beat")
        finally:
            kit.close()
        standby.wait(10)
    finally:
        for b in beats:
            if b.poll() is None:
                os.killpg(b.pid, signal.SIGKILL)
                b.wait(5)
        client.close()
