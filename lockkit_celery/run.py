"""The worker's side: one copy of a task id at a time, one task per key, markers on success.

A run goes through these steps (each a single store operation):

1. take ``run:<task id>``, renewed while the task runs. A second copy of the same task id
   (redelivered after the visibility timeout, or requeued when a pool child died) finds it
   held and is deferred: re-published with a countdown, never run beside the first and never
   lost. If the first copy dies, its lease runs out within ``ttl`` and the deferred copy runs.
2. if ``run:<task id>`` is held with a lease longer than ``ttl``, the task id already
   finished (step 1's lock is kept that long when it ends): the copy is dropped (``Ignore``),
   so the result backend keeps the first copy's result.
3. with ``once``, a ``<key>:done`` marker means the work succeeded within the window.
4. adopt ``<key>`` with the owner token from the message headers, or take it if the call
   was not locked at enqueue (or its lease ran out in the queue). A key held by another task
   id is a duplicate, handled per ``on_duplicate``.

On success the ``once`` markers are written and ``run:<task id>`` is handed off for
``remember`` seconds before the result is stored; when the task ends (``after_return``, after
its result is stored) ``<key>`` is released (after a failure, ``run:<task id>`` is handed
off first). On retry ``<key>`` is handed off for the retried message (whose headers carry the
owner token) and ``run:<task id>`` is released.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from typing import Any

from celery.exceptions import Ignore, Retry

from lockkit_core import LockError, LockKit, LockNotOwned
from lockkit_core.dedupe import (
    derived_task_id,
    done_key,
    find_done_task_id,
    find_task_id,
    finished,
    id_key,
    put_marker,
    run_key,
)
from lockkit_core.lock import Lock

from .duplicates import report_duplicate
from .enqueue import HEADER, delay_of
from .errors import TaskLocked
from .settings import TaskOptions

__all__ = ["Guard", "begin"]

log = logging.getLogger("lockkit.celery")


@dataclass
class Guard:
    """The locks one running copy of a task holds."""

    kit: LockKit
    key: str
    task_id: str
    opts: TaskOptions
    run: Lock
    held: list[Lock] = field(default_factory=list)
    finished: bool = False

    def succeeded(self) -> None:
        """Write the success markers and mark the task id finished; called before the result
        is stored, so that whoever sees the result also sees them."""
        if self.opts.once is not None:
            put_marker(self.kit, done_key(self.key, self.task_id), self.opts.once)
            put_marker(self.kit, done_key(self.key), self.opts.once)
        self._mark_finished()

    def _mark_finished(self) -> None:
        if not self.finished:
            self.finished = True
            # The run lock, no longer renewed, stays held for ``remember``: a lease longer
            # than ``ttl`` tells a late copy that the task id finished (see dedupe.records).
            try:
                self.run.hand_off(self.opts.remember)
            except LockError as exc:  # the result stands; only a late copy is not dropped
                log.warning("task %s could not be marked finished: %s", self.task_id, exc)

    def finish(self, state: str, retval: Any) -> None:
        """Release or hand off the locks for the task's end ``state``."""
        try:
            if state == "RETRY":
                lease = self.opts.enqueue_ttl + _retry_delay(retval)
                for lock in self.held:
                    lock.hand_off(lease)
                self.held = []
                self.run.release()  # the retried message is the same task id: let it run
                return
            self._mark_finished()
        except LockError as exc:
            log.warning("task %s (key %s): %s", self.task_id, self.key, exc)
        finally:
            for lock in self.held:
                try:
                    lock.release()
                except LockError as exc:
                    log.warning("task %s (key %s): %s", self.task_id, self.key, exc)
            self.held = []


def _retry_delay(retval: Any) -> float:
    if isinstance(retval, Retry):
        when = retval.when
        if isinstance(when, int | float):
            return float(when)
        if isinstance(when, datetime.datetime):
            return delay_of({"eta": when})
    return 0.0


def _try(lock: Lock, wait: float) -> bool:
    return lock.acquire(timeout=wait) if wait > 0 else lock.acquire(blocking=False, timeout=0)


def _defer(task: Any, request: Any, key: str, countdown: float) -> None:
    if request.is_eager:
        raise TaskLocked(key, request.id, f"task {request.id} is already running (eager mode)")
    headers = request.headers if isinstance(request.headers, dict) else {}
    # The header marks the copy as already locked at enqueue, so it is published as it is.
    request.headers = {**headers, HEADER: {"key": key, **(headers.get(HEADER) or {})}}
    signature = task.signature_from_request(request)
    signature.apply_async(countdown=countdown)
    raise Ignore()


def _on_busy(task: Any, request: Any, guard: Guard, original: str | None) -> None:
    report_duplicate(task, guard.key, request.id, original, "busy")
    policy = guard.opts.on_duplicate
    if policy == "retry":
        _defer(task, request, guard.key, max(0.5, guard.opts.ttl / 3))
    if policy == "raise":
        raise TaskLocked(
            guard.key, original, f"task {task.name} key {guard.key!r} is held by {original}"
        )
    raise Ignore()


def begin(task: Any, request: Any, key: str, opts: TaskOptions, kit: LockKit) -> Guard:
    """Take what a run needs (module docstring, steps 1-4), or raise ``Ignore``/``TaskLocked``."""
    task_id: str = request.id
    run = kit.lock(run_key(task_id), ttl=opts.ttl, auto_renew=True, reentrant=False)
    if not _try(run, opts.wait):
        if finished(kit, task_id, opts.ttl):
            report_duplicate(task, key, task_id, task_id, "finished")
            raise Ignore()
        report_duplicate(task, key, task_id, task_id, "running")
        _defer(task, request, key, max(0.5, min(opts.ttl / 3, 30.0)))
    guard = Guard(kit, key, task_id, opts, run)
    try:
        if opts.once is not None and kit.admin.info(done_key(key)) is not None:
            original = find_done_task_id(kit, key)
            report_duplicate(task, key, task_id, original, "done")
            if opts.on_duplicate == "raise":
                raise TaskLocked(key, original, f"task {task.name} already done as {original}")
            raise Ignore()
        headers = request.headers if isinstance(request.headers, dict) else {}
        record = dict(headers.get(HEADER) or {})
        lock = _take(kit, key, opts, record.get("owner"))
        if lock is None:
            _on_busy(task, request, guard, find_task_id(kit, key))
        assert lock is not None
        guard.held.append(lock)
        if derived_task_id(kit, key, lock.token) != task_id:
            marker = _take(kit, id_key(key, task_id), opts, record.get("id_owner"))
            if marker is not None:
                guard.held.append(marker)
                record["id_owner"] = marker.owner
        # A retry re-publishes these headers: it must adopt what this run holds.
        record.update(key=key, owner=lock.owner)
        request.headers = {**headers, HEADER: record}
    except BaseException:
        for lock in [*guard.held, run]:
            try:
                lock.release()
            except LockError as exc:  # the error on the way out is the one to report
                log.warning("task %s (key %s): %s", task_id, key, exc)
        raise
    return guard


def _take(kit: LockKit, key: str, opts: TaskOptions, owner: str | None) -> Lock | None:
    """Adopt ``key`` under ``owner``, else take it; None if another owner holds it."""
    if owner:
        adopted = kit.lock(key, owner=owner, ttl=opts.ttl, auto_renew=True, reentrant=False)
        try:
            adopted.acquire()
            return adopted
        except LockNotOwned:
            pass  # its lease ran out in the queue, or it was released: take it afresh
    lock = kit.lock(key, ttl=opts.ttl, auto_renew=True, reentrant=False)
    return lock if _try(lock, opts.wait) else None
