"""The worker's side of task deduplication: one copy of a task id at a time, one task per key.

:func:`start_run` goes through these steps (each a single store operation):

1. take ``run:<task id>``, renewed while the task runs. A second copy of the same task id
   finds it held: ``"running"``. If the first copy dies, its lease runs out within ``ttl``.
2. if ``run:<task id>`` is held with a lease longer than ``ttl``, the task id already
   finished (step 1's lock is kept that long when it ends): ``"finished"``.
3. with ``once``, a ``<key>:done`` marker means the work succeeded within the window: ``"done"``.
4. adopt ``<key>`` with the owner token the producer handed over, or take it if the call was
   not locked at enqueue (or its lease ran out in the queue). A key held by another task id
   is ``"busy"``.

What the adapter does with a :class:`Busy` answer (drop, defer, raise) is its own policy. On
success :meth:`Guard.succeeded` writes the ``once`` markers and hands ``run:<task id>`` off for
``remember`` seconds; :meth:`Guard.ended` releases ``<key>`` when the task is over.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import LockError, LockNotOwned
from ..kit import LockKit
from ..lock import Lock
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

__all__ = ["Busy", "Guard", "RunOptions", "start_run", "try_lock"]

log = logging.getLogger("lockkit.dedupe")


class RunOptions(Protocol):
    """The options a run needs (an adapter's decided options satisfy it)."""

    @property
    def ttl(self) -> float: ...
    @property
    def once(self) -> float | None: ...
    @property
    def wait(self) -> float: ...
    @property
    def remember(self) -> float: ...


@dataclass(frozen=True)
class Busy:
    """Why a copy may not run (``reason``, see the module docstring) and who has the key."""

    reason: str
    original: str | None


@dataclass
class Guard:
    """The locks one running copy of a task holds."""

    kit: LockKit
    key: str
    task_id: str
    opts: RunOptions
    run: Lock
    held: list[Lock] = field(default_factory=list)
    finished: bool = False

    @property
    def owner(self) -> str | None:
        """The owner token of ``<key>`` (to hand to a retried copy)."""
        return self.held[0].owner if self.held else None

    @property
    def id_owner(self) -> str | None:
        """The owner token of the ``<key>:id:<task id>`` record, if this run holds one."""
        return self.held[1].owner if len(self.held) > 1 else None

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

    def retried(self, lease: float) -> None:
        """Hand ``<key>`` off for ``lease`` seconds to the retried copy (same task id, which
        adopts it) and free ``run:<task id>`` so that copy may run."""
        try:
            for lock in self.held:
                lock.hand_off(lease)
            self.held = []
            self.run.release()
        except LockError as exc:
            log.warning("task %s (key %s): %s", self.task_id, self.key, exc)
        finally:
            self._release_held()

    def ended(self) -> None:
        """The task is over (whatever its outcome): mark it finished, release ``<key>``."""
        try:
            self._mark_finished()
        finally:
            self._release_held()

    def _release_held(self) -> None:
        for lock in self.held:
            try:
                lock.release()
            except LockError as exc:
                log.warning("task %s (key %s): %s", self.task_id, self.key, exc)
        self.held = []


def try_lock(lock: Lock, wait: float) -> bool:
    """Acquire ``lock`` waiting up to ``wait`` seconds (0: one attempt)."""
    return lock.acquire(timeout=wait) if wait > 0 else lock.acquire(blocking=False, timeout=0)


def start_run(
    kit: LockKit,
    key: str,
    task_id: str,
    opts: RunOptions,
    owner: str | None = None,
    id_owner: str | None = None,
    *,
    derived: bool = True,
) -> Guard | Busy:
    """Take what a run needs (module docstring, steps 1-4), or say why it may not run.

    Whatever it took is given back before it answers :class:`Busy` or raises."""
    run = kit.lock(run_key(task_id), ttl=opts.ttl, auto_renew=True, reentrant=False)
    if not try_lock(run, opts.wait):
        if finished(kit, task_id, opts.ttl):
            return Busy("finished", task_id)
        return Busy("running", task_id)
    guard = Guard(kit, key, task_id, opts, run)
    try:
        if opts.once is not None and kit.admin.info(done_key(key)) is not None:
            busy = Busy("done", find_done_task_id(kit, key))
        else:
            lock = _take(kit, key, opts, owner)
            if lock is None:
                busy = Busy("busy", find_task_id(kit, key, derived=derived))
            else:
                guard.held.append(lock)
                if derived_task_id(kit, key, lock.token) != task_id:
                    marker = _take(kit, id_key(key, task_id), opts, id_owner)
                    if marker is not None:
                        guard.held.append(marker)
                return guard
    except BaseException:
        _release_all([*guard.held, run], task_id, key)
        raise
    _release_all([*guard.held, run], task_id, key)
    return busy


def _release_all(locks: list[Lock], task_id: str, key: str) -> None:
    for lock in locks:
        try:
            lock.release()
        except LockError as exc:  # an error on the way out is the one to report
            log.warning("task %s (key %s): %s", task_id, key, exc)


def _take(kit: LockKit, key: str, opts: RunOptions, owner: str | None) -> Lock | None:
    """Adopt ``key`` under ``owner``, else take it; None if another owner holds it."""
    if owner:
        adopted = kit.lock(key, owner=owner, ttl=opts.ttl, auto_renew=True, reentrant=False)
        try:
            adopted.acquire()
            return adopted
        except LockNotOwned:
            pass  # its lease ran out in the queue, or it was released: take it afresh
    lock = kit.lock(key, ttl=opts.ttl, auto_renew=True, reentrant=False)
    return lock if try_lock(lock, opts.wait) else None
