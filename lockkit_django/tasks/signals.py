"""The :data:`task_duplicate` signal of Django tasks: the core logs and counts every skipped
duplicate (:mod:`lockkit_core.dedupe.answers`, logger ``lockkit.django.tasks`` here), and
this adds Django's signal::

    @receiver(task_duplicate)
    def count(sender, key, task_id, original_id, reason, **_):
        metrics.incr("tasks.duplicate", tags=[f"task:{sender.name}", f"reason:{reason}"])
"""

from __future__ import annotations

import logging
from typing import Any, Final

from django.dispatch import Signal

from lockkit_core.dedupe import Duplicate
from lockkit_core.observe import Labels

__all__ = ["report_duplicate", "task_duplicate"]

log = logging.getLogger("lockkit.django.tasks")

#: ``task_duplicate(sender=task, key=, task_id=, original_id=, reason=)``, sent once per
#: duplicate in the process that saw it (the one that enqueued, or the worker).
task_duplicate: Final = Signal()


def report_duplicate(task: Any, dup: Duplicate, on_duplicate: str, labels: Labels) -> None:
    """Log, count and signal one duplicate (``on_duplicate``: the task's option;
    ``labels``: its kit's, for the ``lockkit.task.duplicates`` metric)."""
    dup.report(log, on_duplicate, labels)
    task_duplicate.send(
        sender=task, key=dup.key, task_id=dup.task_id, original_id=dup.original, reason=dup.reason
    )
