"""Task deduplication's run start and end, each in one script call (``lua/lock.lua``,
'batch'): one atomic step over the locks of several keys.

On a server in cluster mode those keys are in different hash slots, and the server refuses the
batch (CROSSSLOT) before running any of it: the backend then makes the calls one lock at a
time (the :class:`~lockkit_core.backends.base.Backend` default), as every later batch does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import BackendUnavailable
from ..base import Grant
from .leaver import ABANDONED_FOR
from .scripts import Script, owner_id, stored_key, stored_keys

if TYPE_CHECKING:
    from .backend import RedisBackend

__all__ = ["RunBatches"]

log = logging.getLogger("lockkit.redis")


class RunBatches:
    """``begin_run`` and ``end_run`` of one :class:`RedisBackend` as script batches; each
    returns None where the server cannot run them as one (cluster mode), and the backend
    then makes the calls one by one."""

    def __init__(self, backend: RedisBackend) -> None:
        self._backend = backend
        self._scripts: dict[int, Script] = {}  # by their number of keys
        self.one_slot = backend.sharded  # cluster mode: no script over several locks' slots

    def begin(
        self, run: str, run_owner: str, key: str, owner: str, ttl: float
    ) -> tuple[Grant, Grant] | None:
        """Take the run record and, if that worked, adopt the call's key."""
        if self.one_slot:
            return None
        backend = self._backend
        ms = max(1, int(ttl * 1000))
        holder = backend._holder_here
        # 'mark': the run record's token is never read, so no fencing counter is kept for it
        acquire = ("mark", "always", owner_id(run_owner), ms, holder, "", backend._floor, "1")
        adopt = ("adopt", "if-ok", owner, ms)
        try:
            replies = self._run(
                f"start a run on {run!r} and {key!r}", [run, key], [acquire, adopt], retry=True
            )
        except BackendUnavailable:
            # as try_acquire: the batch may still land when the link heals
            backend.leaver.give_back(run, run_owner, time.monotonic() + ABANDONED_FOR + 2 * ttl)
            raise
        if replies is None:
            return None
        taken, adopted = replies
        if not taken[0]:
            pttl = int(taken[1])
            return Grant(False, retry_after=pttl / 1000.0 if pttl > 0 else None), Grant(False)
        run_grant = Grant(True, backend.saw_token(int(taken[1])))
        if adopted[0] != 1:
            return run_grant, Grant(False)
        return run_grant, Grant(True, backend.saw_token(int(adopted[1])))

    def end(
        self, releases: Sequence[tuple[str, str]], marker: tuple[str, str, float] | None
    ) -> list[bool] | None:
        """Take the finished ``marker`` record (if any), then release each lock."""
        if self.one_slot:
            return None
        backend = self._backend
        keys: list[str] = []
        ops: list[tuple[Any, ...]] = []
        if marker is not None:
            key, owner, ttl = marker
            ms = max(1, int(ttl * 1000))
            holder = backend._holder_here
            keys.append(key)
            # 'mark': nobody reads a marker's token, so no fencing counter is kept for it
            ops.append(("mark", "always", owner_id(owner), ms, holder, "", backend._floor, "1"))
        for key, owner in releases:
            keys.append(key)
            ops.append(("release", "always", owner, backend._floor))
        replies = self._run(f"end a run on {keys!r}", keys, ops)
        if replies is None:
            return None
        return [reply[0] == 1 for reply in replies[len(ops) - len(releases) :]]

    def _run(
        self, what: str, keys: list[str], ops: list[tuple[Any, ...]], *, retry: bool = False
    ) -> list[Any] | None:
        """Run ``ops`` (name, when, arguments), one per key of ``keys``, in one script call;
        their replies, in order. ``retry`` as for ``RedisBackend._call``. None on a server
        in cluster mode, which refused it before running it."""
        backend = self._backend
        stored = [part for key in keys for part in stored_keys(stored_key(key))]
        args: list[Any] = ["batch"]
        for name, when, *rest in ops:
            args += [name, when, len(rest), *rest]
        script = self._scripts.get(len(stored))
        if script is None:
            script = self._scripts[len(stored)] = backend.new_script(len(stored))
        crossslot = backend._redis.exceptions.ClusterCrossSlotError

        def run() -> list[Any] | None:
            try:
                return list(script(*stored, *args))
            except crossslot:
                return None  # CROSSSLOT: refused before it ran, nothing was done

        replies = backend._call(what, run, retry=retry)
        if replies is None:
            log.info("%s runs in cluster mode: batches go one lock at a time", backend.describe())
            self.one_slot = True
        return replies
