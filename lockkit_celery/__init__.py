"""lockkit for Celery: tasks that do not run twice for one key.

>>> from lockkit_celery import locked_task
>>> @locked_task(unique_on=["order_id"], once=86400)       # doctest: +SKIP
... def send_payment_sms(order_id, phone): ...

What it guarantees, on a store every producer and worker shares (Redis, or ``file://`` on one
host):

* **Enqueue**: while a call's key is queued or running, another ``delay``/``apply_async``
  with the same key publishes nothing and returns the ``AsyncResult`` of the queued task
  (``on_duplicate="raise"``: :class:`TaskLocked` with ``.task_id``). A failed publish gives
  the lock back. A duplicate that carries callbacks (``link``, a chain's next steps) or is a
  member of a group or chord raises :class:`TaskLocked` (``.task_id`` names the running
  task) rather than drop them. ``app.send_task`` does not pass through the task class: its
  calls are deduplicated only by the worker (a duplicate is handled per ``on_duplicate``;
  with ``"skip"`` its result becomes the original's, see :mod:`lockkit_celery.worker`).
  With Django, ``delay_on_commit``/``apply_async_on_commit`` take the lock when the
  transaction commits: a rollback publishes nothing and leaves no lock.
* **Run**: the worker adopts the lock with the owner token from the message headers and renews
  it while the task runs. A second copy of the same task id (broker redelivery after the
  visibility timeout, a pool child killed with ``acks_late``) never runs beside the first:
  it is deferred until the first ends (then dropped, the first's result stands) or its lease
  runs out (then it runs). Finished task ids are remembered for ``remember`` seconds (a day;
  never less than the visibility timeout). Retries and countdowns keep the lock.
* **once=<seconds>**: after a success, a marker is written before the lock is released, so a
  call with the same key within the window (a late redelivery, a client that retries) is
  skipped and answered with the task id that did the work.

What ``once`` cannot promise: it gives *at most one successful run per key in the window*,
not "exactly one side effect". If the worker dies after the SMS left but before the marker was
written (a SIGKILL, a lost machine), the task ran but never succeeded, and its redelivered copy
sends again. Close that gap where the side effect happens, with an idempotency key the provider
honours, derived from the same key, so a resend is a no-op there::

    @locked_task(unique_on=["order_id"], once=86400, bind=True)
    def send_payment_sms(self, order_id, phone):
        sms.send(phone, text(order_id), idempotency_key=f"payment-sms-{order_id}")

A lease (``ttl``, 30 s by default) bounds how long a dead worker blocks the key; a worker that is
stopped longer than that (SIGSTOP, a frozen VM) can lose its lock while it still runs. With
``app.conf.lockkit_clear_stale_on_start = True`` a worker that becomes ready frees at once the
run locks that dead processes of its host left (:func:`clear_stale_locks`; off by default, see
:mod:`lockkit_celery.stale` for when host and pid do not name one process).
Two beats (for availability) schedule once with ``BeatLock(app).install()``.
Skipped duplicates are logged (logger ``lockkit.celery``), counted
(:func:`duplicate_counts`) and sent as the :data:`task_duplicate` signal.
"""

from lockkit_core.dedupe import TaskKey, canonical_json

from .beat import BeatLock
from .doctor import doctor_app
from .errors import TaskLocked
from .settings import kit_for
from .signals import duplicate_counts, task_duplicate
from .stale import clear_stale_locks
from .startup import check_app
from .task import LockedTask, locked_task

__all__ = [
    "BeatLock",
    "LockedTask",
    "TaskKey",
    "TaskLocked",
    "canonical_json",
    "check_app",
    "clear_stale_locks",
    "doctor_app",
    "duplicate_counts",
    "kit_for",
    "locked_task",
    "task_duplicate",
]
