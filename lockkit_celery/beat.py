"""``BeatLock``: one ``celery beat`` schedules at a time, the others wait as standbys.

Run a beat on two hosts for availability without sending every periodic task twice::

    BeatLock(app).install()

Each beat takes the lock when it starts (``beat_init``) and waits there until it gets it;
the holder renews it while it runs. A beat that dies frees the lock within ``ttl`` and a
standby starts scheduling. A beat whose lock is lost (the store was unreachable until the
lease ran out) stops, so two beats never schedule side by side for longer than that.
"""

from __future__ import annotations

import atexit
import logging
from typing import Any

from celery import Celery
from celery.signals import beat_init

from lockkit_core import LockError
from lockkit_core.config import UNSET
from lockkit_core.lock import Lock

from .settings import kit_for

__all__ = ["BeatLock"]

log = logging.getLogger("lockkit.celery")


class BeatLock:
    """The lock that lets one beat of ``app`` schedule; ``install()`` connects it.

    ``ttl`` defaults to ``app.conf.lockkit_ttl``, then to the store's TTL: how long a standby
    waits after the scheduling beat died."""

    def __init__(self, app: Celery, key: str = "celery-beat", ttl: Any = UNSET) -> None:
        self.app = app
        self.key = key
        self.ttl = ttl
        self.lock: Lock | None = None

    def install(self) -> BeatLock:
        """Take the lock in every beat this app starts from now on."""
        beat_init.connect(self._on_beat_init, weak=False)
        return self

    def _on_beat_init(self, sender: Any = None, **_: Any) -> None:
        app = self.app
        ttl = self.ttl if self.ttl is not UNSET else app.conf.get("lockkit_ttl", UNSET)
        if getattr(sender, "app", None) is not app:
            return
        lock = kit_for(app).lock(
            self.key,
            ttl=ttl,
            auto_renew=True,
            reentrant=False,
            on_lost=lambda _lock: self._lost(sender),
        )
        log.info("beat: waiting for the lock %r (another beat may hold it)", self.key)
        lock.acquire(timeout=None)
        log.info("beat: took the lock %r; scheduling", self.key)
        self.lock = lock
        atexit.register(self._release)

    def _lost(self, service: Any) -> None:
        log.error("beat: lost the lock %r; stopping so that another beat takes over", self.key)
        service.stop()

    def _release(self) -> None:
        lock, self.lock = self.lock, None
        if lock is not None:
            try:
                lock.release()
            except LockError as exc:
                log.warning("beat: %s", exc)
