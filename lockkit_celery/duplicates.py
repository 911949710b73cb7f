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
from typing import Any, Final

from celery.utils.dispatch import Signal

from lockkit_core.dedupe.duplicates import REASONS, count_duplicate, duplicate_counts

__all__ = ["REASONS", "duplicate_counts", "report_duplicate", "task_duplicate"]

log = logging.getLogger("lockkit.celery")

#: ``task_duplicate(sender=task, key=, task_id=, original_id=, reason=)``, sent once per
#: duplicate, in the process that saw it (producer or worker).
task_duplicate: Final = Signal(name="lockkit_task_duplicate")


def report_duplicate(
    task: Any, key: str, task_id: str | None, original_id: str | None, reason: str
) -> None:
    """Log, count and signal one duplicate."""
    count_duplicate(log, task.name, key, task_id, original_id, reason)
    task_duplicate.send(
        sender=task, key=key, task_id=task_id, original_id=original_id, reason=reason
    )
