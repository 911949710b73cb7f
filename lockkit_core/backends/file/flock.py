"""``flock`` with patience: a process stopped inside its critical section (microseconds
long) makes others fail with ``BackendUnavailable`` instead of hanging."""

from __future__ import annotations

import sys
import time

from ...errors import BackendUnavailable

if sys.platform != "win32":
    import fcntl

#: how long an operation waits for another process's critical section (microseconds long)
FLOCK_PATIENCE = 5.0


def flock(fd: int, operation: int, path: str, patience: float = FLOCK_PATIENCE) -> None:
    """``flock`` that gives up after ``patience`` seconds instead of hanging behind a
    process stopped inside its critical section."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        if patience <= 0:
            raise BackendUnavailable(f"{path!r} is flocked by another process") from None
    deadline = time.monotonic() + patience
    delay = 0.00002
    while True:
        time.sleep(delay)
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise BackendUnavailable(
                    f"{path!r} stayed flocked for {patience:g} s; a process is stopped "
                    "inside its few-microsecond critical section"
                ) from None
        delay = min(delay * 2, 0.001)
