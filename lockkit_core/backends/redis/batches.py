"""Task deduplication's run start and end, each in one script call: one atomic step over the
locks of several keys. ``lua/runs.lua`` does it when nobody waits on those locks (the common
case: a few commands, without lock.lua's general machinery); with a waiter queued on any of
them it changes nothing and says so, and the same step goes as ``lua/lock.lua``'s 'batch',
which serves the waiters in order.

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
from .scripts import PREFIX, Script, owner_id, stored_key, stored_keys

if TYPE_CHECKING:
    from .backend import RedisBackend

__all__ = ["RunBatches"]

#: lua/runs.lua's answer when a lock of the step has waiters: it did nothing
_QUEUED = -2
_NOT_GRANTED = Grant(False)

log = logging.getLogger("lockkit.redis")


class RunBatches:
    """``begin_run`` and ``end_run`` of one :class:`RedisBackend` as script batches; each
    returns None where the server cannot run them as one (cluster mode), and the backend
    then makes the calls one by one."""

    def __init__(self, backend: RedisBackend) -> None:
        self._backend = backend
        #: by the script's name and number of keys
        self._scripts: dict[tuple[str, int], Script] = {}
        self.one_slot = backend.sharded  # cluster mode: no script over several locks' slots

    def begin(
        self, run: str, run_owner: str, key: str, owner: str, ttl: float
    ) -> tuple[Grant, Grant] | None:
        """Take the run record and, if that worked, adopt the call's key."""
        if self.one_slot:
            return None
        backend = self._backend
        ms = max(1, int(ttl * 1000))
        run_id = owner_id(run_owner)
        run_lock = PREFIX + run + "}"
        try:
            # One task, one call: the command is packed here as text (see _send), not
            # through the general script call's layers.
            reply = self._send(
                self._cached("runs", 3), "start a run on", run,
                (run_lock, run_lock + ":q", PREFIX + key + "}", "begin", run_id, str(ms),
                 backend._holder_here, str(backend._floor), owner),
            )  # fmt: skip
            if reply is None:
                return None
            if reply[0] != _QUEUED:
                taken = reply
                adopted = [0] if len(reply) < 3 or int(reply[2]) < 0 else [1, reply[2]]
            else:
                # 'mark': the run record's token is never read, so no fencing counter is kept
                acquire = ("mark", "always", run_id, ms, backend._holder_here, "",
                           backend._floor, "1")  # fmt: skip
                adopt = ("adopt", "if-ok", owner, ms)
                replies = self._run(
                    f"start a run on {run!r} and {key!r}", [run, key], [acquire, adopt], retry=True
                )
                if replies is None:
                    return None
                taken, adopted = replies
        except BackendUnavailable:
            # as try_acquire: the batch may still land when the link heals
            backend.leaver.give_back(run, run_owner, time.monotonic() + ABANDONED_FOR + 2 * ttl)
            raise
        if not taken[0]:
            pttl = int(taken[1])
            return Grant(False, retry_after=pttl / 1000.0 if pttl > 0 else None), Grant(False)
        run_grant = Grant(True, backend.saw_token(int(taken[1])))
        if adopted[0] != 1:
            return run_grant, _NOT_GRANTED
        return run_grant, Grant(True, backend.saw_token(int(adopted[1])))

    def end(
        self,
        releases: Sequence[tuple[str, str]],
        marker: tuple[str, str, float] | None,
        guard: tuple[str, str, float] | None = None,
    ) -> list[bool] | None:
        """Take the finished ``marker`` record (if any), then release each lock, and the
        ``guard`` last: the others only if it is still held (``Backend.end_run``)."""
        if self.one_slot:
            return None
        backend = self._backend
        quick = self._quick_end(releases, marker, guard)
        if quick is not None or self.one_slot or guard is not None:
            # A guarded end with waiters queued goes as the Backend default (the guard renewed
            # first, then one release per lock, each serving its queue): a rare path.
            return quick
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

    def _quick_end(
        self,
        releases: Sequence[tuple[str, str]],
        marker: tuple[str, str, float] | None,
        guard: tuple[str, str, float] | None,
    ) -> list[bool] | None:
        """:meth:`end` by ``lua/runs.lua``; None if a lock has waiters (nothing was done) or
        the server is in cluster mode."""
        keys: list[str] = []
        args: list[str] = ["end", "0" if marker is None else "1", "0" if guard is None else "1"]
        if guard is not None:
            releases = [*releases, (guard[0], guard[1])]
        if marker is not None:
            backend = self._backend
            key, owner, ttl = marker
            lock = PREFIX + key + "}"
            keys += (lock, lock + ":q")
            args += (owner_id(owner), str(max(1, int(ttl * 1000))), backend._holder_here,
                     str(backend._floor))  # fmt: skip
        for key, owner in releases:
            lock = PREFIX + key + "}"
            keys += (lock, lock + ":q")
            args.append(owner)
        first = releases[0][0] if releases else marker[0] if marker else ""
        reply = self._send(self._cached("runs", len(keys)), "end a run on", first, (*keys, *args),
                           retry=False)  # fmt: skip
        if reply is None or (reply and reply[0] == _QUEUED):
            return None
        return [answer == 1 for answer in reply]

    def _cached(self, name: str, numkeys: int) -> Script:
        """``lua/<name>.lua`` called with ``numkeys`` keys, made once."""
        script = self._scripts.get((name, numkeys))
        if script is None:
            script = self._scripts[name, numkeys] = self._backend.new_script(numkeys, name)
        return script

    def _send(
        self, script: Script, what: str, key: str, parts: Sequence[str], *, retry: bool = True
    ) -> list[Any] | None:
        """One call of ``script`` with ``parts`` (its keys, then its arguments, all text):
        its reply, or None on a server in cluster mode, which refused it (CROSSSLOT) before
        running it. Errors as ``RedisBackend._call``'s (``what`` to ``key``), which a failed
        first try goes on through: this is its happy path without the layers."""
        backend = self._backend
        packed = script.pack_text(parts)
        try:
            reply: list[Any] = script.call_packed(packed)
        except (backend._redis.exceptions.RedisError, TimeoutError) as exc:
            if isinstance(exc, backend._redis.exceptions.ClusterCrossSlotError):
                self._refused()  # refused before it ran, nothing was done
                return None
            error = backend.failure(f"{what} {key!r}", exc, may_retry=retry)
            if error is not None:
                raise error from exc
            return self._sent_again(script, packed, what, key)
        return reply

    def _sent_again(self, script: Script, packed: bytes, what: str, key: str) -> list[Any] | None:
        """The one retry of :meth:`_send` (its connection dropped), as ``_call`` makes it."""
        crossslot = self._backend._redis.exceptions.ClusterCrossSlotError

        def run() -> list[Any] | None:
            try:
                return list(script.call_packed(packed))
            except crossslot:
                return None

        reply = self._backend._call(what, run, key=key)
        if reply is None:
            self._refused()
        return reply

    def _refused(self) -> None:
        log.info("%s runs in cluster mode: batches go one lock at a time",
                 self._backend.describe())  # fmt: skip
        self.one_slot = True

    def _run(
        self, what: str, keys: list[str], ops: list[tuple[Any, ...]], *, retry: bool = False
    ) -> list[Any] | None:
        """Run ``ops`` (name, when, arguments), one per key of ``keys``, in one script call;
        their replies, in order. ``retry`` as for ``RedisBackend._call``. None on a server
        in cluster mode, which refused it before running it."""
        stored = [part for key in keys for part in stored_keys(stored_key(key))]
        args: list[Any] = ["batch"]
        for name, when, *rest in ops:
            args += [name, when, len(rest), *rest]
        return self._script("lock", what, stored, args, retry=retry)

    def _script(
        self,
        name: str,
        what: str,
        keys: list[str],
        args: list[Any],
        *,
        retry: bool,
        key: str | None = None,
    ) -> list[Any] | None:
        """One call of ``lua/<name>.lua`` with ``keys`` and ``args``; its reply, or None on a
        server in cluster mode, which refused it (CROSSSLOT) before running it."""
        backend = self._backend
        script = self._cached(name, len(keys))
        crossslot = backend._redis.exceptions.ClusterCrossSlotError

        def run() -> list[Any] | None:
            try:
                return list(script(*keys, *args))
            except crossslot:
                return None  # CROSSSLOT: refused before it ran, nothing was done

        reply = backend._call(what, run, retry=retry, key=key)
        if reply is None:
            self._refused()
        return reply
