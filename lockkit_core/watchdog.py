"""The watchdog: one thread per process that renews leases ttl/4 to ttl/3 after each began (on
a grid, so holds taken close together share a wake-up) and reports lost ones.

Holds that neither renew nor have ``on_lost`` callbacks never reach it: they cost nothing.

It knows holds, never kits: a kit dropped without ``close()`` is collected as usual (its
``weakref.finalize`` closes its store). A hold keeps its backend alive only while it is being
renewed, and it is renewed only while someone can still release it: a leaked hold (every
handle dropped, or a reentrant hold whose thread exited; see :mod:`lockkit_core.hold`) is
dropped at its next renewal with a ``ResourceWarning``, and its lease runs out on the store.

Renewals run one at a time on that thread, so a store that stops answering delays the
renewals of every other store by up to its socket timeout per attempt: keep socket timeouts
well below ttl/3. (A hold whose deadline passes meanwhile is reported lost, never renewed late.)
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import threading
import time
import warnings

from . import lease, process
from .errors import BackendError
from .hold import Hold

__all__ = ["Watchdog", "watch"]

log = logging.getLogger("lockkit")


class Watchdog:
    """Renews leases and reports lost ones on one thread, started on demand; it exits
    after 30 s with nothing to watch.

    :meth:`watch` runs on every acquisition, so it only appends to :attr:`_new` (a deque:
    appending is atomic) and takes the condition's lock only when the thread must hear of
    it at once: not running, asleep past the new due time, or the backlog grown large. The
    thread moves what was appended onto its heap whenever it wakes, and re-reads the
    backlog after publishing when it will wake (``_wake_at``) and before sleeping, so an
    append is either seen by the thread or sees ``_wake_at`` (or ``_running``) and wakes it.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Hold]] = []
        self._new: collections.deque[tuple[float, Hold]] = collections.deque()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._running = False
        self._compact_at = 256
        self._wake_at = 0.0  # when the sleeping thread wakes by itself; 0 while it is busy

    def watch(self, hold: Hold) -> None:
        """Start renewing ``hold`` (auto_renew), or watching its deadline (on_lost only).
        A hold without a lease (``ttl=None``) has neither: it is not watched."""
        if hold.ttl is None:
            return
        if hold.auto_renew:
            due = _renew_due(hold, hold.ttl)
        elif _has_on_lost(hold):
            due = hold.deadline
        else:
            return
        self._new.append((due, hold))  # as schedule() does
        if not self._running or due < self._wake_at or len(self._new) > self._compact_at:
            self._poke(due)

    def schedule(self, hold: Hold, due: float) -> None:
        """Service ``hold`` at monotonic time ``due``."""
        self._new.append((due, hold))
        if not self._running or due < self._wake_at or len(self._new) > self._compact_at:
            self._poke(due)

    def _poke(self, due: float) -> None:
        """Start the thread, or wake it if it sleeps past ``due``; sweep a long backlog."""
        with self._cond:
            if len(self._new) > self._compact_at:
                self._take_new()
            if not self._running:
                self._running = True
                self._thread = threading.Thread(
                    target=self._run, name="lockkit-watchdog", daemon=True
                )
                self._thread.start()
            elif due < self._wake_at:
                self._cond.notify()

    def reset_after_fork(self) -> None:
        """Forget the parent's holds and thread (a child never renews its parent's locks)."""
        self._wake_at = 0.0
        self._cond = threading.Condition()
        self._heap = []
        self._new = collections.deque()
        self._thread = None
        self._running = False

    def _take_new(self) -> None:
        """Move the backlog onto the heap; call with the lock held. A released hold is
        dropped, unless it is due before all the heap holds: the thread then sleeps until
        its due time, on the grid where the next holds fall, rather than being woken by
        each of them (see _next)."""
        new = self._new
        heap = self._heap
        while new:
            due, hold = new.popleft()
            if hold.active or not heap or due < heap[0][0]:
                heapq.heappush(heap, (due, next(self._seq), hold))
        if len(heap) > self._compact_at:
            # Released holds are dropped lazily; sweep them when they pile up.
            self._heap = heap = [entry for entry in heap if entry[2].active]
            heapq.heapify(heap)
            self._compact_at = max(256, 2 * len(heap))

    def _next(self) -> Hold | None:
        """Wait for the next hold due (None: nothing to watch for 30 s, so the thread ends);
        call with the lock held."""
        while True:
            self._take_new()
            if self._heap:
                due, _, hold = self._heap[0]
                # Released holds stay until their due time: popping them early would wake
                # this thread (and take the GIL) once per acquisition, as a new hold's
                # renewal is then earlier than the next wake-up. Due times lie on a grid
                # (lease.renew_at): one wake-up serves every hold of one step.
                if due <= time.monotonic():
                    heapq.heappop(self._heap)
                    if hold.active:
                        return hold
                    continue
            else:
                due = time.monotonic() + 30.0
            self._wake_at = due
            if self._new:  # appended since _take_new, maybe before _wake_at was set
                self._wake_at = 0.0
                continue
            self._cond.wait(max(0.0, due - time.monotonic()))
            self._wake_at = 0.0
            if not self._heap and not self._new:
                self._running = False
                if self._new:  # a watch() that still saw the thread running
                    self._running = True
                    continue
                self._thread = None
                return None

    def _run(self) -> None:
        while True:
            with self._cond:
                hold = self._next()
            if hold is None:
                return
            try:
                self._service(hold)
            except Exception:  # the watchdog must survive anything a callback does
                log.exception("lockkit watchdog failed on %r", hold.full_key)

    def _service(self, hold: Hold) -> None:
        """Renew ``hold``, report it lost, or drop it if it leaked."""
        if not hold.active or hold.pid != process.pid():
            return
        leak = hold.leak()
        if leak is not None:
            _drop_leaked(hold, leak)
        elif hold.is_lost():
            hold.mark_lost(hold.lost_reason or "its lease ran out before it was renewed")
        elif not hold.auto_renew:
            self.schedule(hold, hold.deadline)
        else:
            self._renew(hold)

    def _renew(self, hold: Hold) -> None:
        ttl = hold.ttl
        assert ttl is not None  # holds without a lease are never watched
        try:
            renewed = hold.extend(ttl, raise_on_loss=False)
        except BackendError as exc:
            if not hold.active:
                return
            now = time.monotonic()
            if now >= hold.deadline:
                hold.mark_lost(f"renewal failed until the lease ran out ({exc})")
                return
            log.warning("renewing %r failed, retrying: %s", hold.full_key, exc)
            self.schedule(hold, min(now + lease.retry_interval(ttl), hold.deadline))
            return
        if renewed and hold.active:
            self.schedule(hold, _renew_due(hold, ttl))


def _renew_due(hold: Hold, ttl: float) -> float:
    """When to renew ``hold``: ttl/4 to ttl/3 (:func:`lease.renew_at`) after its lease began,
    that is after the request that granted or last extended it was *sent* (its deadline counts
    from then), not after the answer came: a grant or renewal whose answer took most of a
    third of the ttl is renewed at once, not a third of a ttl later, past its deadline."""
    return lease.renew_at(hold.deadline - lease.validity(ttl), ttl)


def _has_on_lost(hold: Hold) -> bool:
    lock = hold.lock()
    return lock is not None and bool(lock.on_lost)


def _drop_leaked(hold: Hold, why: str) -> None:
    hold.active = False
    hold.lost_reason = f"it leaked ({why}) and was no longer renewed"
    if hold.auto_renew:
        warnings.warn(
            f"lockkit: lock {hold.key!r} ({hold.full_key}) leaked: {why}. It is no longer "
            f"renewed and frees itself within its ttl ({hold.ttl:g} s). Release what you "
            "acquire, e.g. with 'with kit.lock(...):'",
            ResourceWarning,
            stacklevel=1,
        )


_watchdog = Watchdog()
#: hand a hold to the process's watchdog (see :meth:`Watchdog.watch`)
watch = _watchdog.watch


process.after_fork(_watchdog.reset_after_fork)
