"""Skipped duplicates of Django tasks: a log line (``lockkit.django.tasks``), the core's
counter (:func:`lockkit_core.dedupe.duplicate_counts`) and the :data:`task_duplicate` signal::

    @receiver(task_duplicate)
    def count(sender, key, task_id, original_id, reason, **_):
        metrics.incr("tasks.duplicate", tags=[f"task:{sender.name}", f"reason:{reason}"])
"""

from __future__ import annotations

import logging
from typing import Any, Final

from django.dispatch import Signal

from lockkit_core.dedupe import count_duplicate

__all__ = ["report_duplicate", "task_duplicate"]

log = logging.getLogger("lockkit.django.tasks")

#: ``task_duplicate(sender=task, key=, task_id=, original_id=, reason=)``, sent once per
#: duplicate in the process that saw it (the one that enqueued, or the worker).
task_duplicate: Final = Signal()


def report_duplicate(
    task: Any, key: str, task_id: str | None, original_id: str | None, reason: str
) -> None:
    """Log, count and signal one duplicate."""
    count_duplicate(log, task.module_path, key, task_id, original_id, reason)
    task_duplicate.send(
        sender=task, key=key, task_id=task_id, original_id=original_id, reason=reason
    )
