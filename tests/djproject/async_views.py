"""Async views of the uvicorn tests: each counts how many of its runs overlap in a shared
file (DJPROJECT_OVERLAP_DIR), across the server's worker processes; and a heartbeat that
tells whether a lock wait stalled a worker's event loop."""

from __future__ import annotations

import asyncio
import fcntl
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, JsonResponse

from lockkit_django import get_kit, lock_view


def _overlap_file(name: str) -> Path:
    base = Path(os.environ.get("DJPROJECT_OVERLAP_DIR", tempfile.gettempdir()))
    return base / f"overlap-{name}.txt"


def _step(name: str, delta: int) -> None:
    """Add ``delta`` to the runs of ``name`` now running; keep the most ever seen at once."""
    with open(_overlap_file(name), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        now, most = (int(x) for x in (f.read().split() or ["0", "0"]))
        now += delta
        f.seek(0)
        f.truncate()
        f.write(f"{now} {max(most, now)}")


def read_overlap(name: str) -> tuple[int, int]:
    """(running now, most running at once) for ``name``."""
    path = _overlap_file(name)
    if not path.exists():
        return 0, 0
    now, most = (int(x) for x in path.read_text().split())
    return now, most


async def unlocked(request: HttpRequest, name: str) -> JsonResponse:
    """Works ``?sleep=`` seconds (default 0.2) while counted as running."""
    await asyncio.to_thread(_step, name, 1)
    try:
        await asyncio.sleep(float(request.GET.get("sleep", "0.2")))
    finally:
        await asyncio.to_thread(_step, name, -1)
    return JsonResponse({"pid": os.getpid()})


locked = lock_view("aoverlap:{name}")(unlocked)


async def ping(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"pid": os.getpid()})


# -- event-loop watch: how long the loop went without running a ready task ----------------

_TICK = 0.01
_gaps: deque[tuple[float, float]] = deque(maxlen=2000)
_heartbeat: list[asyncio.Task[None]] = []


async def _beat() -> None:
    last = time.monotonic()
    while True:
        await asyncio.sleep(_TICK)
        now = time.monotonic()
        _gaps.append((now, now - last - _TICK))
        last = now


def max_gap(window: float) -> float:
    """The longest the event loop of this process stalled in the last ``window`` seconds."""
    since = time.monotonic() - window
    return max((gap for at, gap in _gaps if at >= since), default=0.0)


class LoopWatchMiddleware:
    """With DJPROJECT_LOOPWATCH=1, an async server's loop runs a 10 ms heartbeat from its first
    request on, so a view can tell whether anything (a lock wait) stalled the loop."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        return self.get_response(request)

    async def _acall(self, request: HttpRequest) -> Any:
        if os.environ.get("DJPROJECT_LOOPWATCH") and not _heartbeat:
            _heartbeat.append(asyncio.get_running_loop().create_task(_beat()))
        return await self.get_response(request)


@lock_view("await:{name}", wait=5)
async def waiting(request: HttpRequest, name: str) -> JsonResponse:
    """Holds its lock ``?sleep=`` seconds; a second caller waits up to 5 s for it (in a
    thread). Answers the longest loop stall of the last ``?window=`` seconds."""
    await asyncio.sleep(float(request.GET.get("sleep", "0")))
    await asyncio.sleep(3 * _TICK)  # the heartbeat records a stall on its next tick
    window = float(request.GET.get("window", "5"))
    return JsonResponse({"pid": os.getpid(), "max_gap": max_gap(window)})


async def blocking_wait(request: HttpRequest, name: str) -> JsonResponse:
    """The wrong way, to show what the watch sees: wait for the lock on the event loop."""
    lock = get_kit().lock(f"await:{name}", reentrant=False, timeout=5)
    lock.acquire()  # blocks the whole loop while it waits
    lock.release()
    await asyncio.sleep(3 * _TICK)
    window = float(request.GET.get("window", "5"))
    return JsonResponse({"pid": os.getpid(), "max_gap": max_gap(window)})
