"""``wait_until()`` (and ``await_until()`` on an event loop): poll for a state a test cannot be
told about (a queue entry, a watch), with a deadline, so that a test waits only as long as the
state takes to come."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    """Return once ``condition()`` is true; fail the test if it is not within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still not true after {timeout:g} s"
        time.sleep(0.005)


async def await_until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    """:func:`wait_until` for a coroutine: the loop runs on between two looks."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"still not true after {timeout:g} s"
        await asyncio.sleep(0.01)
