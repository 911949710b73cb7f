"""The worker's side: one copy of a task id at a time, one task per key, markers on success.

The steps are the core's (:mod:`lockkit_core.dedupe.run_guard`); this module turns its
answers into Celery's habits:

* ``"running"``: a second copy of the same task id (redelivered after the visibility timeout,
  or requeued when a pool child died) is deferred: re-published with a countdown, never run
  beside the first and never lost. If the first copy dies, its lease runs out within ``ttl``
  and the deferred copy runs.
* ``"finished"``: the task id already finished; the copy is dropped (``Ignore``), so the
  result backend keeps the first copy's result.
* ``"busy"`` (the key held by another task id: two ``send_task`` calls, a producer without
  the lockkit base, a canvas) and ``"done"`` (``once``): per ``on_duplicate``. ``"raise"``
  fails it with :class:`TaskLocked`; ``"retry"`` defers it until the key is free, then runs
  it; ``"skip"`` resolves it to the original's result (:func:`mirror`).

What ``AsyncResult(dup_id).get()`` gives for a duplicate skipped here (``"skip"``):

* the original's return value once the original succeeded (the duplicate's state is
  ``SUCCESS``; a chord or chain it belongs to goes on with that value, once);
* the original's exception once the original failed (state ``FAILURE``);
* :class:`TaskLocked` naming the original's id (``.task_id``) when the original cannot be
  told or its result is not stored any more (``result_expires``, ``ignore_result``);
* while the original is still queued or running, the duplicate waits: it is re-published
  with a countdown carrying the original's id, and looks again; if the original is lost
  (neither running, nor holding the key, nor recorded finished, nor with a result), the
  duplicate runs itself.

With no result backend (or ``ignore_result``) nobody can wait on a result, and a skipped
duplicate is dropped (``Ignore``).

On success the finished record is written before the result is stored, and ``<key>`` and the
``run`` record are released in that same store operation; with ``once``, the ``once`` markers
and the finished record are written then, and ``<key>`` and ``run`` are released when the task
ends (``after_return``, after its result is stored), as after a failure. On retry ``<key>``
is handed off for the retried message (whose headers carry the owner token) and the ``run``
record is released.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from celery import states
from celery.backends.base import DisabledBackend
from celery.exceptions import Ignore, Retry

from lockkit_core.dedupe import Duplicate, RunGuard, TaskOptions, TaskRecords, start_run

from .enqueue import HEADER, delay_of
from .signals import report_duplicate

__all__ = ["begin", "finish", "mirror"]

log = logging.getLogger("lockkit.celery")


def finish(guard: RunGuard, state: str, retval: Any) -> None:
    """Release or hand off the locks for the task's end ``state``."""
    if state == "RETRY":
        guard.retried(guard.opts.enqueue_ttl + _retry_delay(retval))
    else:
        guard.ended()


def _retry_delay(retval: Any) -> float:
    if isinstance(retval, Retry):
        when = retval.when
        if isinstance(when, int | float):
            return float(when)
        if isinstance(when, datetime.datetime):
            return delay_of({"eta": when})
    return 0.0


def _record(request: Any) -> dict[str, Any]:
    headers = request.headers if isinstance(request.headers, dict) else {}
    return dict(headers.get(HEADER) or {})


def _defer(task: Any, request: Any, dup: Duplicate, countdown: float, **mark: Any) -> None:
    if request.is_eager:
        raise dup.error("eager mode cannot defer it")
    headers = request.headers if isinstance(request.headers, dict) else {}
    # The header marks the copy as already handled at enqueue, so it is published as it is.
    record = {**_record(request), "key": dup.key, **mark}
    request.headers = {**headers, HEADER: record}
    signature = task.signature_from_request(request)
    signature.apply_async(countdown=countdown)
    raise Ignore()


def _poll(opts: TaskOptions) -> float:
    return max(0.5, min(opts.ttl / 3, 30.0))


def mirror(task: Any, request: Any, dup: Duplicate, opts: TaskOptions) -> Any:
    """The result of a duplicate skipped at run time: the original's (module docstring)."""
    if isinstance(task.backend, DisabledBackend) or task.ignore_result:
        raise Ignore()  # nobody can wait on this result
    if dup.original is None:
        raise dup.error("the task that holds the key could not be told")
    original = task.AsyncResult(dup.original)
    state = original.state
    if state == states.SUCCESS:
        return original.result
    if state == states.FAILURE and isinstance(original.result, BaseException):
        raise original.result
    if state in states.READY_STATES:
        raise dup.error(f"the original ended {state}")
    if dup.reason == "done":
        raise dup.error("the original's result is no longer stored")
    # Look again soon, then less and less often (0.5 s doubling, at most every ttl/3).
    waited = float(_record(request).get("mirror_wait") or 0.25)
    countdown = min(waited * 2, _poll(opts))
    _defer(task, request, dup, countdown, mirror=dup.original, mirror_wait=countdown)
    raise AssertionError("unreachable")  # _defer always raises


def _mirror_again(
    task: Any, request: Any, key: str, opts: TaskOptions, records: TaskRecords, original: str
) -> tuple[bool, Any]:
    """A deferred duplicate looks at its original again: (True, its result) once it has
    one, (False, None) if the original is lost and this copy should run itself."""
    dup = Duplicate(task.name, key, "busy", original, request.id)
    if records.lost(original, key):
        state = task.AsyncResult(original).state
        if state not in states.READY_STATES:
            log.warning("task %s: original %s of duplicate %s is lost; running it",
                        task.name, original, request.id)  # fmt: skip
            return False, None
    return True, mirror(task, request, dup, opts)


def begin(
    task: Any, request: Any, key: str, opts: TaskOptions, records: TaskRecords
) -> tuple[RunGuard | None, Any]:
    """Take what a run needs (see :func:`start_run`): ``(guard, None)``; or, for a duplicate
    skipped here, ``(None, the result to store)``; or raise ``Ignore``/``TaskLocked``."""
    headers = request.headers if isinstance(request.headers, dict) else {}
    record: dict[str, Any] = headers.get(HEADER) or {}
    if record.get("mirror"):
        mirrored, value = _mirror_again(task, request, key, opts, records, record["mirror"])
        if mirrored:
            return None, value
        record = {name: value for name, value in record.items() if name != "mirror"}
    got = start_run(records, task.name, key, request.id, opts, record.get("owner"))
    if isinstance(got, Duplicate):
        return None, _refuse(task, request, opts, got, records)
    # A retry re-publishes these headers: it must adopt what this run holds. The message's
    # own header already says so when this run adopted the producer's lock (the common
    # case): the headers are copied only when something changed.
    owner = got.owner
    if (
        record is not headers.get(HEADER)
        or record.get("key") != key
        or record.get("owner") != owner
    ):
        request.headers = {**headers, HEADER: {**record, "key": key, "owner": owner}}
    return got, None


def _refuse(
    task: Any, request: Any, opts: TaskOptions, dup: Duplicate, records: TaskRecords
) -> Any:
    report_duplicate(task, dup, opts.on_duplicate, records.kit.labels)
    if dup.reason == "finished":
        raise Ignore()
    if dup.reason == "running":
        _defer(task, request, dup, _poll(opts))
    if dup.reason == "busy" and opts.on_duplicate == "retry":
        _defer(task, request, dup, max(0.5, opts.ttl / 3))
    if opts.on_duplicate == "raise":
        raise dup.error()
    return mirror(task, request, dup, opts)
