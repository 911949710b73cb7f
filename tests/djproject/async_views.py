"""Async views of the uvicorn tests: each counts how many of its runs overlap in a shared
file (DJPROJECT_OVERLAP_DIR), across the server's worker processes."""

from __future__ import annotations

import asyncio
import fcntl
import os
import tempfile
from pathlib import Path

from django.http import HttpRequest, JsonResponse

from lockkit_django import lock_view


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


@lock_view("await:{name}", wait=5)
async def waiting(request: HttpRequest, name: str) -> JsonResponse:
    """Holds its lock ``?sleep=`` seconds; a second caller waits up to 5 s for it."""
    await asyncio.sleep(float(request.GET.get("sleep", "0")))
    return JsonResponse({"pid": os.getpid()})


async def ping(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"pid": os.getpid()})
