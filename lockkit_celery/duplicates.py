"""Skipped duplicates are never silent: a log line, a counter and the ``task_duplicate`` signal.

Connect to the signal to export the numbers::

    from lockkit_celery import task_duplicate

    @task_duplicate.connect
    def count(sender, key, task_id, original_id, reason, **_):
        metrics.incr("celery.duplicate", tags=[f"task:{sender.name}", f"reason:{reason}"])

``reason`` is one of :data:`REASONS`.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any, Final

from celery.utils.dispatch import Signal

__all__ = ["REASONS", "duplicate_counts", "report_duplicate", "task_duplicate"]

log = logging.getLogger("lockkit.celery")

REASONS: Final = {
    "enqueued": "a call while the same key was queued or running: answered with that task",
    "done": "a call within the once= window after a success: answered with that task",
    "running": "a redelivered copy of a task id whose first copy still runs: deferred",
    "finished": "a redelivered copy of a task id that already finished: dropped",
    "busy": "a worker found the key held by another task id: handled per on_duplicate",
}

#: ``task_duplicate(sender=task, key=, task_id=, original_id=, reason=)``, sent once per
#: duplicate, in the process that saw it (producer or worker).
task_duplicate: Final = Signal(name="lockkit_task_duplicate")

_counts: Counter[tuple[str, str]] = Counter()
_counts_lock = threading.Lock()


def duplicate_counts() -> dict[tuple[str, str], int]:
    """Duplicates seen by this process so far, by ``(task name, reason)``."""
    with _counts_lock:
        return dict(_counts)


def report_duplicate(
    task: Any, key: str, task_id: str | None, original_id: str | None, reason: str
) -> None:
    """Log, count and signal one duplicate."""
    with _counts_lock:
        _counts[(task.name, reason)] += 1
    log.info(
        "duplicate %s of task %s (key %s, id %s): original task id %s",
        reason,
        task.name,
        key,
        task_id or "-",
        original_id or "unknown",
    )
    task_duplicate.send(
        sender=task, key=key, task_id=task_id, original_id=original_id, reason=reason
    )
