"""Skipped duplicates are never silent: every task adapter logs and counts them here.

``reason`` is one of :data:`REASONS`; the adapters add their framework's own signal.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Final

__all__ = ["REASONS", "count_duplicate", "duplicate_counts"]

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


def count_duplicate(
    log: logging.Logger,
    task_name: str,
    key: str,
    task_id: str | None,
    original_id: str | None,
    reason: str,
) -> None:
    """Count one duplicate and log it on ``log`` (the adapter's logger)."""
    with _counts_lock:
        _counts[(task_name, reason)] += 1
    log.info(
        "duplicate %s of task %s (key %s, id %s): original task id %s",
        reason,
        task_name,
        key,
        task_id or "-",
        original_id or "unknown",
    )
