"""The few Python 3.11 features the core uses, spelled so they also run on Python 3.10.

Python 3.10 (Ubuntu 22.04's) lacks ``asyncio.timeout`` and ``BaseException.add_note``, and its
``asyncio.TimeoutError`` is not yet the built-in ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["add_note", "cancelling", "wait_at_most", "within"]

T = TypeVar("T")


async def wait_at_most(awaitable: Awaitable[object], seconds: float) -> bool:
    """Await ``awaitable`` for up to ``seconds``: True if it finished, False if time ran out
    (it is then cancelled). ``asyncio.timeout`` where it exists: it awaits in the caller's own
    task; Python 3.10's ``asyncio.wait_for`` runs the awaitable in a task of its own."""
    timeout = getattr(asyncio, "timeout", None)
    try:
        if timeout is None:  # Python 3.10
            await asyncio.wait_for(awaitable, seconds)
        else:
            async with timeout(seconds):
                await awaitable
    except (TimeoutError, asyncio.TimeoutError):  # two classes before Python 3.11
        return False
    return True


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """Await ``awaitable`` for up to ``seconds`` and return its result; the built-in
    ``TimeoutError`` when time runs out (it is then cancelled), on Python 3.10 too."""
    timeout = getattr(asyncio, "timeout", None)
    try:
        if timeout is None:  # Python 3.10
            return await asyncio.wait_for(awaitable, seconds)
        async with timeout(seconds):
            return await awaitable
    except asyncio.TimeoutError as exc:  # TimeoutError itself from Python 3.11 on
        if isinstance(exc, TimeoutError):
            raise
        raise TimeoutError(f"no answer within {seconds:g} s") from exc


def cancelling(task: asyncio.Task[object]) -> int:
    """``task.cancelling()``: the cancellation requests pending on ``task``. Python 3.10 does
    not count them, so there it is 0: a cancellation that a driver swallows (see
    ``drivers._cancel_swallowed``) is then noticed only at the next await that raises it."""
    count = getattr(task, "cancelling", None)
    return int(count()) if count is not None else 0


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``; before Python 3.11 the note is kept in ``__notes__`` (shown by
    tracebacks from 3.11 on, and by tools that read it)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:  # Python 3.10
        notes = getattr(exc, "__notes__", None)
        if not isinstance(notes, list):
            notes = []
            exc.__notes__ = notes  # type: ignore[attr-defined]
        notes.append(note)
