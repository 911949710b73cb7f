"""Giving back the grants of attempts abandoned in an outage (``postgresql://``, ``mysql://``).

An acquire whose answer never came (a dark link: no answer within the socket timeout) may still be
executed by the server once the link heals: the request sits in a buffer somewhere, and an
autocommit statement commits. It would then hold the key for a caller that is gone, for a
whole ttl. So the backend remembers ``(key, owner, server process id)`` of such attempts,
and a background thread, once a second, asks whether that server process is gone; once it
is, nothing sent on its connection can still arrive, and the thread releases the owner's
grant (if there is one: an owner token serves one acquisition, so nothing else can hold
it). While the store cannot be reached it keeps trying, for at most :data:`KEEP_FOR`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ...errors import BackendError

__all__ = ["KEEP_FOR", "GiveBack"]

log = logging.getLogger("lockkit.sql")

#: how long an abandoned attempt is watched for (seconds, on top of its ttl)
KEEP_FOR = 60.0
INTERVAL = 1.0


@dataclass
class _Abandoned:
    key: str
    owner: str
    pid: int
    until: float


class GiveBack:
    """``add()`` an abandoned attempt; the thread gives its grant back when it is safe."""

    def __init__(
        self,
        release: Callable[[str, str], bool],
        alive: Callable[[int], bool],
        interval: float = INTERVAL,
    ) -> None:
        self._release = release
        self._alive = alive
        self._interval = interval
        self._pending: list[_Abandoned] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def add(self, key: str, owner: str, pid: int, ttl: float) -> None:
        with self._lock:
            if self._closed:
                return
            self._pending.append(_Abandoned(key, owner, pid, time.monotonic() + ttl + KEEP_FOR))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="lockkit-sql-giveback", daemon=True
                )
                self._thread.start()

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed or not self._pending:
                    self._thread = None
                    return
                pending = list(self._pending)
            for item in pending:
                if self._settle(item):
                    with self._lock:
                        self._pending.remove(item)
            self._wake.wait(self._interval)

    def _settle(self, item: _Abandoned) -> bool:
        """True when ``item`` needs no more watching."""
        if time.monotonic() > item.until:
            log.warning("gave up watching an abandoned attempt on %r", item.key)
            return True
        try:
            if self._alive(item.pid):
                return False  # its connection may still deliver the attempt
            if self._release(item.key, item.owner):
                log.info("gave back %r, taken by an attempt abandoned in an outage", item.key)
            return True
        except BackendError:
            return False  # still out of reach: try again next round

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._pending.clear()
        self._wake.set()
