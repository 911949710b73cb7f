"""Read-write locks and semaphores on ``redis://``: places as leases in one hash per lock,
a FIFO queue, hand-over by the script and a notice on the waiter's channel (``lua/shared.lua``).

Uncontended, a place costs two round trips: one script call to take it, one to give it back.
A queued waiter is woken by the notice of the release that handed it its place (through the
backend's one listener, as plain locks' waiters are) and confirms it with the store; it also
asks again when the soonest lease it was told of ends, which serves the queue if a holder died.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...errors import BackendUnavailable
from ..base import Grant, Lease, Waiter
from .leaver import Leaver
from .listener import as_text
from .scripts import Script, owner_id, stored_key
from .waiter import RedisWaiter

if TYPE_CHECKING:
    from .backend import RedisBackend

__all__ = ["RedisPlaces"]


def place_keys(full_key: str, mode: str) -> list[str]:
    """Holders, fence counter, queue and queue entries of one read-write lock or semaphore,
    in ``lua/shared.lua``'s order; all in the hash slot of the key's plain lock."""
    lock_key = stored_key(full_key)
    base = lock_key + (":sem" if mode == "slot" else ":rw")
    return [base + ":h", lock_key + ":f", base + ":q", base + ":w"]


class RedisPlaces:
    """The shared-place operations of one :class:`~.backend.RedisBackend`."""

    def __init__(self, backend: RedisBackend) -> None:
        self.backend = backend
        self._script = backend.new_script(4, "shared")
        self._on_record = backend.new_script(1, "shared")
        self.queued: dict[tuple[str, str], _PlaceWaiter] = {}
        self.leaver = Leaver(self._leave)

    def _run(self, what: str, script: Script, args: list[Any], retry: bool = False) -> Any:
        return self.backend._call(what, lambda: script(*args), retry=retry)

    def try_acquire(self, key: str, owner: str, mode: str, limit: int, ttl: float) -> Grant:
        backend = self.backend
        ms = max(1, int(ttl * 1000))
        holder = backend._holder_here
        waiter = self.queued.get((key, owner))
        channel = backend._listener.channel_for(key) if waiter is not None else ""
        args = [*place_keys(key, mode), "acquire", owner_id(owner), mode, limit, ms, holder,
                channel, backend._floor]  # fmt: skip
        sent = time.monotonic()
        try:
            reply = self._run(f"take a {mode} place on {key!r}", self._script, args, retry=True)
        except BackendUnavailable:
            # as RedisBackend.try_acquire: the request may still land when the link heals
            self.leaver.give_back(f"{mode}\0{key}", owner, sent + 60.0 + 2 * ttl)
            raise
        if reply[0]:
            return Grant(True, backend.saw_token(int(reply[1])))
        left = int(reply[1])
        if waiter is not None:
            waiter.ttl = ttl
            if waiter.queued_at is None:
                waiter.queued_at = sent
            waiter.entry_until = sent + max(left, 0) / 1000.0 + 2 * ttl + 2.0
        return Grant(False, retry_after=left / 1000.0 if left > 0 else None)

    def release(self, key: str, owner: str, mode: str) -> bool:
        args = [*place_keys(key, mode), "release", owner, self.backend._floor]
        return bool(self._run(f"release a place on {key!r}", self._script, args))

    def _leave(self, tagged: str, owner: str) -> None:
        mode, _, key = tagged.partition("\0")
        args = [*place_keys(key, mode), "leave", owner, self.backend._floor]
        self._run(f"leave the queue of {key!r}", self._script, args, retry=True)

    def adopt(self, key: str, owner: str, mode: str, ttl: float, op: str = "adopt") -> Any:
        args = [place_keys(key, mode)[0], op, owner, max(1, int(ttl * 1000))]
        reply = self._run(f"{op} a place on {key!r}", self._on_record, args, retry=True)
        if op == "extend":
            return bool(reply)
        if not reply[0]:
            return Grant(False)
        return Grant(True, self.backend.saw_token(int(reply[1])))

    def waiter(self, key: str, owner: str, mode: str, limit: int) -> Waiter:
        return _PlaceWaiter(self, key, owner, mode, limit)

    def holders(self, key: str, mode: str) -> list[Lease]:
        args = [place_keys(key, mode)[0], "holders"]
        reply = self._run(f"read the places of {key!r}", self._on_record, args, retry=True)
        flat = [as_text(v) if isinstance(v, bytes) else v for v in reply]
        leases = []
        for i in range(0, len(flat), 5):
            place_id, kind, left, token, holder = flat[i : i + 5]
            role = {"read": "reader", "write": "writer"}.get(str(kind), "holder")
            leases.append(Lease(key, str(place_id)[:8], int(token), int(left) / 1000.0,
                                f"{role}: {holder}"))  # fmt: skip
        return sorted(leases, key=lambda lease: lease.token or 0)

    def after_fork_in_child(self) -> None:
        self.queued = {}
        self.leaver = Leaver(self._leave)

    def close(self, wait: float) -> None:
        self.leaver.close(wait=wait)


class _PlaceWaiter(RedisWaiter):
    """A plain lock's waiter (woken by the listener, confirming with the store) queued for a
    place instead: it confirms with a place attempt and leaves the place's queue."""

    grant_list = False  # lua/shared.lua wakes by notice only

    def __init__(self, places: RedisPlaces, key: str, owner: str, mode: str, limit: int) -> None:
        self._places = places
        self.mode = mode
        self.limit = limit
        places.queued[(key, owner)] = self
        super().__init__(places.backend, key, owner, fair=True)
        # RedisWaiter listed us among the plain lock's waiters: we are the places'.
        places.backend._queued.pop((key, owner), None)

    def _step(self, step: Any) -> Grant | None:
        if isinstance(step, float):
            return super()._step(step)
        assert self.ttl is not None
        return self._places.try_acquire(self.key, self.owner, self.mode, self.limit, self.ttl)

    def forget(self) -> None:
        self._places.queued.pop((self.key, self.owner), None)
        self._listener.unregister(self)

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self.forget()
        if not acquired and self.queued_at is not None:
            self._places.leaver.leave(f"{self.mode}\0{self.key}", self.owner, self.entry_until)
