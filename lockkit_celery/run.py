"""The worker's side: one copy of a task id at a time, one task per key, markers on success.

The steps are the core's (:mod:`lockkit_core.dedupe.runs`); this module turns its answers
into Celery's habits:

* ``"running"``: a second copy of the same task id (redelivered after the visibility timeout,
  or requeued when a pool child died) is deferred: re-published with a countdown, never run
  beside the first and never lost. If the first copy dies, its lease runs out within ``ttl``
  and the deferred copy runs.
* ``"finished"``: the task id already finished; the copy is dropped (``Ignore``), so the
  result backend keeps the first copy's result.
* ``"done"`` (``once``) and ``"busy"`` (the key held by another task id): handled per
  ``on_duplicate``.

On success the ``once`` markers are written and ``run:<task id>`` is handed off for
``remember`` seconds before the result is stored; when the task ends (``after_return``, after
its result is stored) ``<key>`` is released. On retry ``<key>`` is handed off for the retried
message (whose headers carry the owner token) and ``run:<task id>`` is released.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

from celery.exceptions import Ignore, Retry

from lockkit_core import LockKit
from lockkit_core.dedupe.runs import Busy, Guard, start_run

from .duplicates import report_duplicate
from .enqueue import HEADER, delay_of
from .errors import TaskLocked
from .settings import TaskOptions

__all__ = ["CeleryGuard", "begin"]

log = logging.getLogger("lockkit.celery")


@dataclass
class CeleryGuard:
    """The core's :class:`Guard` of one running copy, ended the Celery way."""

    guard: Guard

    def succeeded(self) -> None:
        """Write the success markers and mark the task id finished (before the result)."""
        self.guard.succeeded()

    def finish(self, state: str, retval: Any) -> None:
        """Release or hand off the locks for the task's end ``state``."""
        if state == "RETRY":
            self.guard.retried(_lease(self.guard, retval))
        else:
            self.guard.ended()


def _lease(guard: Guard, retval: Any) -> float:
    opts = guard.opts
    assert isinstance(opts, TaskOptions)
    return opts.enqueue_ttl + _retry_delay(retval)


def _retry_delay(retval: Any) -> float:
    if isinstance(retval, Retry):
        when = retval.when
        if isinstance(when, int | float):
            return float(when)
        if isinstance(when, datetime.datetime):
            return delay_of({"eta": when})
    return 0.0


def _defer(task: Any, request: Any, key: str, countdown: float) -> None:
    if request.is_eager:
        raise TaskLocked(key, request.id, f"task {request.id} is already running (eager mode)")
    headers = request.headers if isinstance(request.headers, dict) else {}
    # The header marks the copy as already locked at enqueue, so it is published as it is.
    request.headers = {**headers, HEADER: {"key": key, **(headers.get(HEADER) or {})}}
    signature = task.signature_from_request(request)
    signature.apply_async(countdown=countdown)
    raise Ignore()


def _refuse(task: Any, request: Any, key: str, opts: TaskOptions, busy: Busy) -> None:
    task_id: str = request.id
    report_duplicate(task, key, task_id, busy.original, busy.reason)
    if busy.reason == "finished":
        raise Ignore()
    if busy.reason == "running":
        _defer(task, request, key, max(0.5, min(opts.ttl / 3, 30.0)))
    if busy.reason == "busy" and opts.on_duplicate == "retry":
        _defer(task, request, key, max(0.5, opts.ttl / 3))
    if opts.on_duplicate == "raise":
        what = "already done as" if busy.reason == "done" else f"key {key!r} is held by"
        raise TaskLocked(key, busy.original, f"task {task.name} {what} {busy.original}")
    raise Ignore()


def begin(task: Any, request: Any, key: str, opts: TaskOptions, kit: LockKit) -> CeleryGuard:
    """Take what a run needs (see :func:`start_run`), or raise ``Ignore``/``TaskLocked``."""
    headers = request.headers if isinstance(request.headers, dict) else {}
    record = dict(headers.get(HEADER) or {})
    got = start_run(kit, key, request.id, opts, record.get("owner"), record.get("id_owner"))
    if isinstance(got, Busy):
        _refuse(task, request, key, opts, got)
        raise AssertionError("unreachable")  # _refuse always raises
    # A retry re-publishes these headers: it must adopt what this run holds.
    record.update(key=key, owner=got.owner)
    if got.id_owner is not None:
        record["id_owner"] = got.id_owner
    request.headers = {**headers, HEADER: record}
    return CeleryGuard(got)
