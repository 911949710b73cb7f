"""The directory-wide fence counter of ``file://`` (``fence.counter``).

A key's fencing token grows by one per grant and lives in its record. Before lockkit removes
a free record it raises this counter to the record's fence; a key without a record starts
above the counter and at or above the wall clock in microseconds (:meth:`FenceCounter.first`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
import time

from .flock import flock
from .record import NotARecord
from .trust import check_record_file

if sys.platform != "win32":
    import fcntl

#: the counter's file name: not a record (``list`` reads only ``*.lock``)
FENCE_FILE = "fence.counter"


class FenceCounter:
    """The counter file of one lock directory, its descriptor kept open between uses."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FENCE_FILE)
        self._fd = -1
        self._lock = threading.Lock()

    def first(self) -> int:
        """The fence of a key that has no record: above the fence counter and at least the
        wall clock in microseconds.

        The counter holds the fence of every record lockkit removed; the clock covers records
        removed by others (temp cleaners): a key's fence grows by one per grant, at most one
        per microsecond, from a start at or above the clock, so it stays at or below the clock
        unless the clock steps back.
        """
        return max(self.floor() + 1, time.time_ns() // 1000)

    def floor(self) -> int:
        """The fence counter; 0 if it was missing (removed by a temp cleaner)."""
        return self._counter(0)

    def raise_to(self, fence: int) -> None:
        """Make the fence counter at least ``fence``."""
        self._counter(fence)

    def _counter(self, fence: int) -> int:
        """Read the fence counter, raising it to ``fence`` first if that is more."""
        path = self.path
        with self._lock:
            while True:
                if self._fd < 0:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
                    try:
                        check_record_file(fd, path)
                    except BaseException:
                        os.close(fd)
                        raise
                    self._fd = fd
                fd = self._fd
                flock(fd, fcntl.LOCK_EX if fence else fcntl.LOCK_SH, path)
                try:
                    if os.fstat(fd).st_nlink == 0:
                        # Removed by a temp cleaner: start a new one (the clock covers the gap).
                        self._fd = -1
                        os.close(fd)
                        fd = -1
                        continue
                    value = _parse(os.pread(fd, 64, 0), path)
                    if fence > value:
                        data = b"%20d\n" % fence
                        if os.pwrite(fd, data, 0) != len(data):
                            raise OSError(errno.ENOSPC, "short write (disk full?)", path)
                        value = fence
                    return value
                finally:
                    if fd >= 0:
                        fcntl.flock(fd, fcntl.LOCK_UN)

    def _close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def after_fork_in_child(self) -> None:
        """Drop the parent's descriptor (no flock of it is held outside a call)."""
        self._lock = threading.Lock()
        self._close()

    def close(self) -> None:
        """Close the descriptor (reopened on demand)."""
        with self._lock:
            self._close()


def _parse(data: bytes, path: str) -> int:
    try:
        return int(data) if data.strip() else 0
    except ValueError:
        raise NotARecord(
            f"{path!r} does not hold a fence counter; remove it (tokens then restart from "
            "the wall clock in microseconds)"
        ) from None
