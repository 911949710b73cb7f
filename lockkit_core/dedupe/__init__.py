"""Task deduplication without a framework: one policy for every task queue adapter.

Task queue adapters (``lockkit_celery``, ``lockkit_django.tasks``) only translate between
their framework and these, so a call gives the same key, takes the same options and leaves
the same records whichever framework enqueued it:

* :class:`TaskKey` turns a call into its lock key (the task name and its arguments bound to
  the signature, canonical JSON, hashed; or a ``unique_on`` subset, a template, a callable).
* :mod:`~lockkit_core.dedupe.options`: the one option set, its validation and how it is
  decided (keyword > framework setting > default), and the one ``ON_DUPLICATE`` set.
* :mod:`~lockkit_core.dedupe.records`: every record kept in the store, and
  :class:`TaskRecords`, dedupe's own API on the store.
* :mod:`~lockkit_core.dedupe.claims` (the producer: claim a key, or find its task),
  :mod:`~lockkit_core.dedupe.run_guard` (the worker: one copy per task id, one task per key)
  and :mod:`~lockkit_core.dedupe.answers` (the one duplicate answer, logged and counted).
"""

from .answers import REASONS, Duplicate, duplicate_counts
from .calls import TaskKey, canonical_json
from .claims import Claim, claim_key
from .errors import TaskLocked
from .options import (
    DEFAULTS,
    ON_DUPLICATE,
    TaskOptions,
    check_names,
    check_option,
    decide,
    given_options,
)
from .records import (
    RECORD_PREFIX,
    TaskRecords,
    check_call_key,
    derived_owner,
    derived_task_id,
    done_key,
    finished_key,
    id_key,
    id_prefix,
    run_key,
)
from .run_guard import RunGuard, start_run, try_lock

__all__ = [
    "DEFAULTS",
    "ON_DUPLICATE",
    "REASONS",
    "RECORD_PREFIX",
    "Claim",
    "Duplicate",
    "RunGuard",
    "TaskKey",
    "TaskLocked",
    "TaskOptions",
    "TaskRecords",
    "canonical_json",
    "check_call_key",
    "check_names",
    "check_option",
    "claim_key",
    "decide",
    "derived_owner",
    "derived_task_id",
    "done_key",
    "duplicate_counts",
    "finished_key",
    "given_options",
    "id_key",
    "id_prefix",
    "run_key",
    "start_run",
    "try_lock",
]
