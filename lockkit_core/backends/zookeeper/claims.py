"""``Claims``: the lease stamps of holders that took the lock on a release's notice, sent a
moment later from a thread of their own.

A waiter that becomes first holds the lock at once; stamping its lease into its node (the
claim) is a write, and a write sent at the hand-off is still being answered when a short
critical section releases, so the release waits behind it (in the server and for the GIL in
kazoo's thread). So the claim is sent :func:`claim_delay` later, or folded into the release
if that comes first (``backend.py``). Until it is sent the node carries no lease: it is bound to
its session alone, as it was while it queued, so the lease lasts at most that delay longer on
the server than the holder counts on.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Any

from .nodes import NodeData
from .session import Session
from .tree import LockTree, Mine

__all__ = ["UNSENT", "Claims", "claim_delay"]

log = logging.getLogger("lockkit.zookeeper")

#: ``Mine.claim`` of a holder whose claim is not sent yet
UNSENT = "unsent"

#: the longest a claim waits for a release to fold into
_DELAY = 0.02


def claim_delay(lease_ms: int) -> float:
    """How long after the hand-off the claim of a ``lease_ms`` lease is sent (seconds)."""
    return min(_DELAY, lease_ms / 10_000.0)


class Claims:
    """A heap of claims due, served by one daemon thread started on demand (it exits after
    30 s with nothing to do), and the replies to claims sent."""

    def __init__(self, session: Session, tree: LockTree) -> None:
        self._session = session
        self._tree = tree
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Mine]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        #: held while a node's claim changes hands (sent by the thread, or by the release)
        self.lock = threading.Lock()

    def later(self, mine: Mine, delay: float) -> None:
        """Send ``mine``'s claim ``delay`` seconds from now unless it was sent by then."""
        with self._cond:
            entry = (time.monotonic() + delay, next(self._seq), mine)
            heapq.heappush(self._heap, entry)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="lockkit-zookeeper-claims", daemon=True
                )
                self._thread.start()
            elif self._heap[0] is entry:
                self._cond.notify()

    def _send(self, mine: Mine) -> None:
        """Stamp ``mine``'s lease unless it was released or renewed meanwhile."""
        client: Any = self._session._client
        with self.lock:
            if mine.claim is not UNSENT or mine.generation != self._session.generation:
                return
            if client is None:
                return  # the kit was closed: the node went with its session
            if not client.connected:
                # Until the connection is back (or the session ends: the generation says so).
                self.later(mine, claim_delay(mine.lease_ms))
                return
            data = NodeData.here(mine.lease_ms, since=mine.since or None).encode()
            mine.claim = client.set_async(mine.path, data, mine.version)

    def settle(self, key: str, mine: Mine) -> None:
        """Take in the reply to ``mine``'s claim if it has come: the node's new version and
        the server's clock; a claim that failed (the node went: force-released) is no claim."""
        claim = mine.claim
        if claim is None or claim is UNSENT or not claim.ready():
            return  # still on its way: a later request on the node is answered after it
        mine.claim = None
        try:
            stat = claim.get(timeout=0)
        except Exception as exc:
            mine.claimed = False
            log.warning("claiming %r failed: %r", key, exc)
            return
        self._tree.saw(stat)
        mine.version = stat.version

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._heap:
                        self._cond.wait(30.0)
                        if not self._heap:
                            self._thread = None
                            return
                        continue
                    due = self._heap[0][0]
                    now = time.monotonic()
                    if due > now:
                        self._cond.wait(due - now)
                        continue
                    mine = heapq.heappop(self._heap)[2]
                    break
            try:
                self._send(mine)
            except Exception:  # the thread must survive; the claim folds into the release
                log.exception("sending a lock claim failed")

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's claims are the parent's."""
        self._cond = threading.Condition()
        self._heap = []
        self._thread = None
        self.lock = threading.Lock()
