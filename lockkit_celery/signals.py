"""The ``task_duplicate`` signal: skipped duplicates are never silent (the core logs and
counts each one, :mod:`lockkit_core.dedupe.answers`; this adds Celery's signal).

Connect to the signal to export the numbers::

    from lockkit_celery import task_duplicate

    @task_duplicate.connect
    def count(sender, key, task_id, original_id, reason, **_):
        metrics.incr("celery.duplicate", tags=[f"task:{sender.name}", f"reason:{reason}"])

``reason`` is one of :data:`~lockkit_core.dedupe.REASONS`.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from celery.utils.dispatch import Signal

from lockkit_core.dedupe import REASONS, Duplicate, duplicate_counts
from lockkit_core.observe import Labels

__all__ = ["REASONS", "duplicate_counts", "report_duplicate", "task_duplicate"]

log = logging.getLogger("lockkit.celery")

#: ``task_duplicate(sender=task, key=, task_id=, original_id=, reason=)``, sent once per
#: duplicate, in the process that saw it (producer or worker).
task_duplicate: Final = Signal(name="lockkit_task_duplicate")


def report_duplicate(task: Any, dup: Duplicate, on_duplicate: str, labels: Labels) -> None:
    """Log, count and signal one duplicate (``on_duplicate``: the task's option;
    ``labels``: its kit's, for the ``lockkit.task.duplicates`` metric)."""
    dup.report(log, on_duplicate, labels)
    task_duplicate.send(
        sender=task,
        key=dup.key,
        task_id=dup.task_id,
        original_id=dup.original,
        reason=dup.reason,
    )
