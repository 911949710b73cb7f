"""Duplicate protection for Django's tasks (``django.tasks``, or the ``django-tasks`` backport):

::

    from lockkit_django.tasks import locked_task

    @locked_task(unique_on=["order_id"], once=24 * 3600)     # in place of @task
    def send_payment_sms(order_id: int, phone: str) -> None: ...

    send_payment_sms.enqueue(7, "+3161234")   # a TaskResult
    send_payment_sms.enqueue(7, "+3161234")   # the same TaskResult (same id), nothing queued

* **Enqueue**: the call's key (task path + arguments bound to the signature, or
  ``unique_on``/``key=``, as in ``lockkit_celery``) is taken before the backend stores the
  task. While it is queued or running, ``enqueue()`` of the same call queues nothing and
  returns the existing result (``on_duplicate="raise"``: :class:`TaskLocked` with
  ``.task_id``).
* **Run**: the worker holds ``run:<result id>`` and the call's key, renewed every ttl/3, and
  releases both when the function returns or raises. A worker killed with SIGKILL stops
  renewing: both free themselves within ``ttl`` and the same call can be enqueued again. Its
  result row is left as the worker left it (``RUNNING`` for ``db_worker``): nothing runs it
  again.
* **once=<seconds>**: after a success, a call with the same key within the window is
  answered with the result that did the work.

Settings: the lock store is ``settings.LOCKKIT``'s; task defaults go in
``LOCKKIT["TASKS"]`` (see :mod:`lockkit_django.task_options`).
"""

from lockkit_core.dedupe import TaskLocked, TaskOptions, duplicate_counts

from .enqueue import HIDDEN
from .signals import task_duplicate
from .task import LockedTask, TaskLock, locked_task

__all__ = [
    "HIDDEN",
    "LockedTask",
    "TaskLock",
    "TaskLocked",
    "TaskOptions",
    "duplicate_counts",
    "locked_task",
    "task_duplicate",
]
