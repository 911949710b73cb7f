"""Task deduplication without a framework: call keys and the records kept in the lock store.

Task queue adapters (``lockkit_celery``, Django's tasks) build on these, so a call gives the
same key and leaves the same records whichever framework enqueued it:

* :class:`TaskKey` turns a call into its lock key (the task name and its arguments bound to
  the signature, canonical JSON, hashed; or a ``unique_on`` subset, a template, a callable).
* :mod:`lockkit_core.dedupe.records` names the records (``<key>``, ``run:<task id>``, the
  ``once`` markers) and finds the task id that holds a key.
* :mod:`~lockkit_core.dedupe.claims` (the producer: claim a key, or find its task),
  :mod:`~lockkit_core.dedupe.runs` (the worker: one copy per task id, one task per key) and
  :mod:`~lockkit_core.dedupe.duplicates` (every duplicate logged and counted).
"""

from .calls import TaskKey, canonical_json
from .claims import Claim, claim_key, put_id, require_hand_off
from .duplicates import REASONS, count_duplicate, duplicate_counts
from .errors import TaskLocked
from .options import TaskOptions
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
from .runs import Busy, Guard, RunOptions, start_run, try_lock

__all__ = [
    "REASONS",
    "Busy",
    "Claim",
    "Guard",
    "RunOptions",
    "TaskKey",
    "TaskLocked",
    "TaskOptions",
    "canonical_json",
    "claim_key",
    "count_duplicate",
    "derived_task_id",
    "done_key",
    "duplicate_counts",
    "find_done_task_id",
    "find_task_id",
    "finished",
    "id_key",
    "put_id",
    "put_marker",
    "require_hand_off",
    "run_key",
    "start_run",
    "try_lock",
]
