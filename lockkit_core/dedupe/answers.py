"""The one answer to a duplicate, for every task adapter: why it is one, who has the key, the
message and :class:`TaskLocked` it raises, and the log line and count it leaves.

Skipped duplicates are never silent: :meth:`Duplicate.report` logs and counts each one; the
adapters add their framework's own signal.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Final

from .. import observe
from ..observe import Labels
from .errors import TaskLocked

__all__ = ["REASONS", "Duplicate", "duplicate_counts"]

REASONS: Final = {
    "enqueued": "a call while the same key was queued or running: answered with that task",
    "done": "a call within the once= window after a success: answered with that task",
    "running": "a redelivered copy of a task id whose first copy still runs: deferred",
    "finished": "a redelivered copy of a task id that already finished: dropped",
    "busy": "a worker found the key held by another task id: handled per on_duplicate",
}

_counts: Counter[tuple[str, str]] = Counter()
_counts_lock = threading.Lock()


def duplicate_counts() -> dict[tuple[str, str], int]:
    """Duplicates seen by this process so far, by ``(task name, reason)``."""
    with _counts_lock:
        return dict(_counts)


@dataclass(frozen=True)
class Duplicate:
    """One duplicate: ``reason`` (a key of :data:`REASONS`), the ``original`` task id that
    has the key (None when it could not be told), the duplicate's own ``task_id`` (None at
    enqueue, where it has none yet) and ``countdown``, the seconds the original's lease has
    left (None when unknown)."""

    task_name: str
    key: str
    reason: str
    original: str | None
    task_id: str | None = None
    countdown: float | None = None

    def message(self, why: str = "") -> str:
        """What happened, in one line; ``why`` is added after a semicolon."""
        if self.reason == "done":
            what = "already done within its once window"
        elif self.reason in ("enqueued", "busy"):
            what = "already queued or running"
        elif self.reason == "running":
            what = "already running (another copy of the same task id)"
        else:
            what = "already finished (another copy of the same task id)"
        who = f" as {self.original}" if self.original else ""
        mine = f" ({self.task_id} did not run)" if self.task_id else ""
        text = f"task {self.task_name}{mine} is {what}{who} (lock key {self.key!r})"
        return f"{text}; {why}" if why else text

    def error(self, why: str = "") -> TaskLocked:
        """The :class:`TaskLocked` to raise for this duplicate."""
        return TaskLocked(self.key, self.original, self.message(why), self.countdown)

    def action(self, on_duplicate: str) -> str:
        """What the adapters do with it under ``on_duplicate``: ``drop`` a finished copy,
        ``defer`` a running one, else ``retry``, ``raise``, or ``skip`` (answered with the
        original task; ``raise`` when there is none to answer with)."""
        if self.reason == "finished":
            return "drop"
        if self.reason == "running":
            return "defer"
        if on_duplicate == "retry" and self.reason in ("busy", "enqueued"):
            return "retry"
        if on_duplicate == "raise" or self.original is None:
            return "raise"
        return "skip"

    def report(self, log: logging.Logger, on_duplicate: str, labels: Labels) -> None:
        """Count it (also as ``lockkit.task.duplicates`` with the action ``on_duplicate``
        leads to, on metrics labelled ``labels``: the kit's) and log it on ``log`` (the
        adapter's logger)."""
        with _counts_lock:
            _counts[(self.task_name, self.reason)] += 1
        action = self.action(on_duplicate)
        observe.duplicate(labels.common, self.task_name, self.reason, action)
        observe.event(
            log,
            logging.INFO,
            "duplicate",
            self.key,
            "duplicate %s of task %s (key %r, id %s): original task id %s; %s",
            self.reason,
            self.task_name,
            self.key,
            self.task_id or "-",
            self.original or "unknown",
            action,
            task_id=self.task_id or self.original,
        )
