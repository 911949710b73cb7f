"""A beat for test_celery_beat: sends ``beat_tick`` every 0.5 s to the ``beat-test`` queue.

``LOCKKIT_TEST_REDIS`` as in celery_app; ``LOCKKIT_TEST_UNLOCKED=1`` leaves the BeatLock out.
"""

from __future__ import annotations

import os

from celery import Celery

from lockkit_celery.beat import BeatLock

BASE = os.environ.get("LOCKKIT_TEST_REDIS", "redis://127.0.0.1:6379")

app = Celery("celery_beat_app", broker=f"{BASE}/4")
app.conf.update(
    lockkit_url=f"{BASE}/3",
    lockkit_namespace="beattest",
    lockkit_ttl=2,
    beat_schedule={
        "tick": {"task": "beat_tick", "schedule": 0.5, "options": {"queue": "beat-test"}}
    },
    beat_max_loop_interval=0.5,
    broker_connection_retry_on_startup=True,
)

if os.environ.get("LOCKKIT_TEST_UNLOCKED") != "1":
    BeatLock(app).install()
