"""The check the fault tests share for a stopped store: every kind of attempt is refused fast."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from lockkit_core import BackendUnavailable, LockKit


def assert_every_attempt_refused(kit: LockKit, port: int, within: float) -> None:
    """A try, a timed wait and an endless wait on ``kit`` each raise BackendUnavailable naming
    ``port`` in under ``within`` seconds (an endless wait is for the lock, not the server)."""
    attempts: list[Callable[[], bool]] = [
        lambda: kit.lock("k").acquire(blocking=False),
        lambda: kit.lock("k", timeout=0.5).acquire(),
        lambda: kit.lock("k").acquire(),
    ]
    for attempt in attempts:
        start = time.monotonic()
        with pytest.raises(BackendUnavailable) as caught:
            attempt()
        assert time.monotonic() - start < within
        assert str(port) in str(caught.value)
