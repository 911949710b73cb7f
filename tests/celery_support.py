"""A real Celery worker process for the test_celery_* tests, and helpers to read its events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent


class Worker:
    """``celery -A celery_app worker --pool=prefork --concurrency=2`` against ``base``."""

    def __init__(
        self,
        base: str,
        log: Path,
        concurrency: int = 2,
        env: dict[str, str] | None = None,
        queues: str | None = None,
    ) -> None:
        self.base = base
        self.log = log
        env = {**os.environ, **(env or {}), "LOCKKIT_TEST_REDIS": base, "PYTHONPATH": str(HERE)}
        env.pop("DJANGO_SETTINGS_MODULE", None)  # a plain Celery worker, not Django's
        self.env = env
        self._out = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_app", "worker",
             "--pool=prefork", f"--concurrency={concurrency}", "-l", "info",
             "--without-gossip", "--without-mingle", "--without-heartbeat",
             "-n", f"lockkit-test-{os.getpid()}@%h", *(["-Q", queues] if queues else [])],
            cwd=HERE, env=env, stdout=self._out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while b"ready." not in log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("celery worker did not start:\n" + self.log_text()[-3000:])
            time.sleep(0.1)

    def log_text(self) -> str:
        """The worker's output so far."""
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        """Stop the worker and its pool children."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._out.close()


@contextmanager
def sms_held_open(base: str, order_id: int) -> Iterator[None]:
    """Keep a run of ``sms(order_id)`` from ending (it waits after its sleep) until the block
    is left, so callers that a loaded machine starts late still find it running. The hold
    expires by itself after 120 s, should the test die inside."""
    client = redis.Redis.from_url(f"{base}/3")
    client.set(f"hold:sms:{order_id}", 1, ex=120)
    try:
        yield
    finally:
        client.delete(f"hold:sms:{order_id}")
        client.close()


def events(base: str, task: str | None = None) -> list[dict[str, Any]]:
    """Every event recorded so far (of ``task``), in order."""
    client = redis.Redis.from_url(f"{base}/3")
    found = [json.loads(raw) for raw in client.lrange("events", 0, -1)]
    client.close()
    return [e for e in found if task is None or e["task"] == task]


def wait_for(check: Any, timeout: float, what: str) -> None:
    """Poll ``check()`` until true, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


def producer_main(
    base: str,
    go: str,
    calls: int,
    out: str,
    order_id: int = 7,
    env: dict[str, str] | None = None,
) -> None:
    """A producer process: once the file ``go`` exists, enqueue ``sms(order_id)`` ``calls``
    times in mixed styles; write the task ids it got back to ``out``, one a line.
    ``<out>.ready`` tells the test that this producer has imported everything and is waiting.
    ``env``: more variables for celery_app (e.g. ``LOCKKIT_TEST_LOCK_URL``)."""
    os.environ.update(env or {})
    os.environ["LOCKKIT_TEST_REDIS"] = base
    sys.path.insert(0, str(HERE))
    import celery_app

    Path(f"{out}.ready").touch()
    deadline = time.monotonic() + 60
    while not Path(go).exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    ids = []
    for i in range(calls):
        style = i % 4
        if style == 0:
            result = celery_app.sms.delay(order_id)
        elif style == 1:
            result = celery_app.sms.delay(order_id=order_id)
        elif style == 2:
            result = celery_app.sms.apply_async(kwargs={"text": "paid", "order_id": order_id})
        else:
            result = celery_app.sms.apply_async((order_id, "paid"))
        ids.append(result.id)
    Path(out).write_text("\n".join(ids))


def bare_chord_main(base: str, out: str) -> None:
    """A producer without the tasks (no lockkit base, as another service would be): send a
    chord of two identical ``sms(107)`` and the ``collect`` body by name; write the body's
    result id to ``out``."""
    from celery import Celery, chord

    bare = Celery("bare_producer", broker=f"{base}/1", backend=f"{base}/2")
    members = [bare.signature("sms", (107,), {"seconds": 1.0}) for _ in range(2)]
    whole = chord(members, bare.signature("collect", kwargs={"tag": 107})).apply_async()
    Path(out).write_text(whole.id)
