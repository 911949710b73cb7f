"""Task deduplication without a framework: call keys and the records kept in the lock store.

Task queue adapters (``lockkit_celery``, Django's tasks) build on these, so a call gives the
same key and leaves the same records whichever framework enqueued it:

* :class:`TaskKey` turns a call into its lock key (the task name and its arguments bound to
  the signature, canonical JSON, hashed; or a ``unique_on`` subset, a template, a callable).
* :mod:`lockkit_core.dedupe.records` names the records (``<key>``, ``run:<task id>``, the
  ``once`` markers) and finds the task id that holds a key.
"""

from .calls import TaskKey, canonical_json
from .records import (
    derived_task_id,
    done_key,
    find_done_task_id,
    find_task_id,
    finished,
    id_key,
    put_marker,
    run_key,
)

__all__ = [
    "TaskKey",
    "canonical_json",
    "derived_task_id",
    "done_key",
    "find_done_task_id",
    "find_task_id",
    "finished",
    "id_key",
    "put_marker",
    "run_key",
]
