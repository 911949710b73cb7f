"""Leaving the server's queues for owners that are gone, from one background thread."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ...errors import BackendUnavailable

__all__ = ["ABANDONED_FOR", "RETRY", "Leaver"]

log = logging.getLogger("lockkit.redis")

#: how often a leave is tried again while the store is out of reach, and repeated for an
#: attempt abandoned in an outage
RETRY = 1.0
#: how long (seconds, plus two ttls) an attempt that failed in an outage is given back for:
#: its request may still arrive when the link heals, and set a lease of one ttl from then
ABANDONED_FOR = 60.0

_Item = tuple[str, str]  # (key, owner token)


class Leaver:
    """Runs ``leave(key, owner)`` for owners that are gone, so that no caller waits for it
    and nothing they left on the server outlives them by more than about :data:`RETRY`
    once the store can be reached:

    * :meth:`leave`, once: a waiter whose time is up, or that gave up in an outage (the leave
      also passes on a lock handed to it meanwhile);
    * :meth:`give_back`, every :data:`RETRY` seconds until ``until``: an attempt whose caller
      got ``BackendUnavailable``. Its request may still reach the server when the link heals
      (TCP delivers what it held back) and take the key for an owner that is gone, at any
      time until then. An owner token serves one acquisition, so nobody holds under it
      legitimately any more.

    The thread runs only while there is something to do.
    """

    def __init__(self, leave: Callable[[str, str], None]) -> None:
        self._leave = leave
        self._cond = threading.Condition()
        self._once: dict[_Item, float] = {}  # -> give up at (monotonic)
        self._repeat: dict[_Item, float] = {}  # -> until (monotonic)
        self._thread: threading.Thread | None = None
        self._closing = False

    def leave(self, key: str, owner: str, until: float) -> None:
        """Leave the queue of ``key`` for ``owner`` as soon as the store answers, trying
        until ``until`` (when its queue entry expires by itself)."""
        self._add(self._once, (key, owner), until)

    def give_back(self, key: str, owner: str, until: float) -> None:
        """Leave (giving back any lease ``owner`` holds) now and every :data:`RETRY` seconds
        until ``until``."""
        self._add(self._repeat, (key, owner), until)

    def _add(self, pending: dict[_Item, float], item: _Item, until: float) -> None:
        with self._cond:
            pending[item] = max(until, pending.get(item, 0.0))
            self._cond.notify()
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(
                    target=self._run, name="lockkit-redis-leaver", daemon=True
                )
                self._thread.start()

    def _due(self) -> list[_Item] | None:
        """What to leave on this pass (the waiters first), or None when there is nothing."""
        now = time.monotonic()
        for pending in (self._once, self._repeat):
            for item in [item for item, until in pending.items() if until < now]:
                del pending[item]
        if self._closing:
            self._repeat.clear()  # closing: only what is left to do once, one pass
        if not self._once and not self._repeat:
            return None
        return [*self._once, *(item for item in self._repeat if item not in self._once)]

    def _run(self) -> None:
        while True:
            with self._cond:
                due = self._due()
                if due is None:
                    self._thread = None
                    return
            unreachable = self._pass(due)
            with self._cond:
                if self._closing:
                    self._once.clear()
                elif unreachable or not self._once:
                    self._cond.wait(RETRY)  # the repeats' pace; a new waiter wakes it

    def _pass(self, due: list[_Item]) -> bool:
        """Leave for each of ``due``; True if the store could not be reached."""
        for item in due:
            try:
                self._leave(*item)
            except BackendUnavailable:
                return True  # the rest would wait the same socket timeout: next pass
            except Exception as exc:  # a lease it holds then ends by itself
                log.warning("could not leave the queue of %r for a gone owner: %s", item[0], exc)
                with self._cond:
                    self._repeat.pop(item, None)
            with self._cond:
                self._once.pop(item, None)
        return False

    def close(self, wait: float) -> None:
        """Stop; leaves still to do once get one more pass, for at most ``wait`` seconds."""
        with self._cond:
            self._closing = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(wait)
