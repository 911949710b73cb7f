"""The release listener: one pub/sub connection per backend on which hand-overs arrive."""

from __future__ import annotations

import logging
import random
import secrets
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from redis.client import PubSub

    from .backend import RedisBackend
    from .waiter import RedisWaiter

__all__ = ["Listener", "as_text"]

log = logging.getLogger("lockkit.redis")


class Listener:
    """One pub/sub connection per backend, subscribed to a channel of its own on which the
    store tells this process that a lock was handed to one of its waiters.

    It runs only while someone waits (it stops after ``idle`` seconds without waiters).
    """

    def __init__(self, backend: RedisBackend, idle: float = 30.0) -> None:
        self._backend = backend
        self._idle = idle
        self._lock = threading.Lock()
        self.channel = "lockkit:w:" + secrets.token_hex(8)
        self._waiters: dict[str, RedisWaiter] = {}  # by owner token
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()  # subscribed and reading
        self._closed = False

    @property
    def healthy(self) -> bool:
        return self._ready.is_set()

    def register(self, waiter: RedisWaiter) -> None:
        with self._lock:
            self._waiters[waiter.owner] = waiter
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lockkit-redis-listener", daemon=True
                )
                self._thread.start()

    def unregister(self, waiter: RedisWaiter) -> None:
        with self._lock:
            if self._waiters.get(waiter.owner) is waiter:
                del self._waiters[waiter.owner]

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def _wake_all(self) -> None:
        with self._lock:
            for waiter in self._waiters.values():
                waiter.event.set()

    def _handed(self, payload: str) -> None:
        """``<owner>|<token>``: the lock was handed to that waiter of ours."""
        owner, _, token = payload.partition("|")
        with self._lock:
            waiter = self._waiters.get(owner)
            if waiter is not None and token.isdigit():
                waiter.handed = int(token)
                waiter.event.set()

    def _run(self) -> None:
        backoff = 0.05
        idle_since = time.monotonic()
        pubsub: PubSub | None = None
        try:
            while not self._closed:
                try:
                    if pubsub is None:
                        client = self._backend.listener_client
                        pubsub = client.pubsub()  # type: ignore[no-untyped-call]
                        pubsub.subscribe(self.channel)
                    message = pubsub.get_message(timeout=0.5)
                except Exception as exc:  # any failure: drop the connection, wake, reconnect
                    if self._closed:
                        break
                    self._ready.clear()
                    self._wake_all()
                    if backoff == 0.05:  # first failure of a streak
                        log.warning("redis release listener lost its connection: %s", exc)
                    if pubsub is not None:
                        _quiet_close(pubsub)
                        pubsub = None
                    time.sleep(backoff * random.uniform(0.5, 1.5))
                    backoff = min(1.0, backoff * 2)
                    message = None
                else:
                    backoff = 0.05
                if message is not None:
                    kind = message["type"]
                    if kind == "subscribe":
                        self._ready.set()
                        self._wake_all()  # anything handed to us while we were away
                    elif kind == "message":
                        self._handed(as_text(message["data"]))
                with self._lock:
                    if self._waiters:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > self._idle:
                        self._thread = None
                        return
        finally:
            self._ready.clear()
            if pubsub is not None:
                _quiet_close(pubsub)

    def close(self) -> None:
        self._closed = True


def as_text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _quiet_close(pubsub: PubSub) -> None:
    try:
        pubsub.close()
    except Exception as exc:  # closing a broken connection may fail again; nothing to save
        log.debug("closing the release listener failed: %s", exc)
