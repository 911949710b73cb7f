"""Deadlines: run a callback at a monotonic time, on one thread per process.

The guard uses it for ``STREAM_MAX_HOLD``: every streamed response that holds a lock gets a
deadline, and most are cancelled (the stream closes first). One thread serves them all,
started on demand, so a thousand slow streams cost a heap entry each, not a thread each.
Callbacks run one at a time on that thread: one that waits on a store that stopped answering
delays the others by up to its socket timeout.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

from .. import process

__all__ = ["Deadline", "at"]

log = logging.getLogger("lockkit")


class Deadline:
    """One scheduled callback; :meth:`cancel` makes it a no-op if it has not run yet."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback: Callable[[], None] | None = callback

    def cancel(self) -> None:
        """Do not run the callback (harmless once it ran)."""
        self.callback = None


class _Deadlines:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Deadline]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def at(self, due: float, callback: Callable[[], None]) -> Deadline:
        deadline = Deadline(callback)
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), deadline))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lockkit-deadlines", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return deadline

    def reset_after_fork(self) -> None:
        # The child has no such thread, and must not run its parent's callbacks.
        self._cond = threading.Condition()
        self._heap = []
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    # Cancelled entries leave the heap as they come due, not before.
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        _, _, deadline = heapq.heappop(self._heap)
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            callback, deadline.callback = deadline.callback, None
            if callback is None:
                continue
            try:
                callback()
            except Exception:  # one broken callback must not stop the others' deadlines
                log.exception("a lockkit deadline callback failed")


_deadlines = _Deadlines()
process.after_fork(_deadlines.reset_after_fork)


def at(due: float, callback: Callable[[], None]) -> Deadline:
    """Run ``callback`` at monotonic time ``due`` (on the deadlines thread)."""
    return _deadlines.at(due, callback)
