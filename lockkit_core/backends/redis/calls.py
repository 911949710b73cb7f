"""What each lock operation sends to ``lua/lock.lua`` and what its reply means: the keys and
arguments of ``acquire``, ``release``, ``leave``, ``extend`` and ``adopt``, and the grants
their replies make. No I/O: the blocking backend (:mod:`.backend`) and its asyncio
operations (:mod:`.aio`) send the same calls and read the same replies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..base import Grant
from .listener import as_text
from .scripts import grant_list, owner_id, stored_key, stored_keys

if TYPE_CHECKING:
    from .listener import Listener
    from .waiter import RedisWaiter

__all__ = ["LockCalls"]


class LockCalls:
    """The script's call shapes, on the state of one :class:`~.backend.RedisBackend`: its
    queued waiters, its listener's channel, the floor of its fencing tokens and the name of
    its process."""

    # set by RedisBackend.__init__, which says what each holds
    _queued: dict[tuple[str, str], RedisWaiter]
    _listener: Listener
    _floor: int
    _holder_here: str

    def saw_token(self, token: int) -> int:
        """Raise the floor for later grants to ``token``; returns ``token``."""
        self._floor = max(self._floor, token)
        return token

    def acquire_args(self, key: str, owner: str, ttl: float) -> list[Any]:
        """The 5 keys and the arguments of the script's ``acquire`` (see
        :meth:`.backend.RedisBackend.try_acquire`)."""
        ms = max(1, int(ttl * 1000))
        holder = self._holder_here
        waiter = self._queued.get((key, owner))
        if waiter is None:
            channel, who, fair = "", owner_id(owner), "1"
        else:
            channel, who = self._listener.channel_for(key), waiter.id
            # '2': the release pushes our grant to our list, which we block on (BLPOP); '3':
            # and we send that BLPOP with this very call (RedisWaiter.attempt)
            if not waiter.fair:
                fair = "0"
            elif waiter.reads_grants:
                fair = "3" if waiter.pipelines else "2"
            else:
                fair = "1"
        lock_key = stored_key(key)
        keys = [*stored_keys(lock_key), grant_list(lock_key, who)]
        return [*keys, "acquire", who, ms, holder, channel, self._floor, fair]

    def acquire_answer(self, key: str, owner: str, ttl: float, reply: Any, sent: float) -> Grant:
        """The grant the script's ``reply`` to an ``acquire`` sent at ``sent`` means."""
        waiter = self._queued.get((key, owner))
        if reply[0]:
            return Grant(True, self.saw_token(int(reply[1])))
        # {0, pttl}, or {0, pttl, ask again in ms} while the queue's head may be passed over
        # (lua/lock.lua, bounded barging): releases until then need not tell us
        pttl = int(reply[1])
        wait_ms = int(reply[2]) if len(reply) > 2 else pttl
        if waiter is not None:
            waiter.ttl = ttl
            if waiter.queued_at is None:
                waiter.queued_at = sent
            # as lua/lock.lua keeps the entry: the lease we are told of, two of ours, 2 s
            waiter.entry_until = sent + max(pttl, 0) / 1000.0 + 2 * ttl + 2.0
            waiter.ask_at = sent + wait_ms / 1000.0 if len(reply) > 2 else None
        return Grant(False, retry_after=wait_ms / 1000.0 if wait_ms > 0 else None)

    def release_args(self, key: str, owner: str, *, ours: bool = False) -> list[Any]:
        """The keys and arguments of the script's ``release``. ``ours``: while this process
        has waiters, a lock handed to one of them comes back in the reply (see
        :meth:`release_answer`) instead of as a notice."""
        channel = self._listener.channel_for(key) if ours and self._listener.waiting else ""
        return [*stored_keys(stored_key(key)), "release", owner, self._floor, channel]

    def release_answer(self, key: str, reply: Any, sent: float) -> bool:
        """Whether the release sent at ``sent`` released; a lock it handed to a waiter of
        this process (``{1, id, token}``) goes to that waiter: the store's own reply is its
        grant, so the waiter sends nothing, and the lease is counted from ``sent``."""
        if isinstance(reply, list):
            token = self.saw_token(int(reply[2]))
            self._listener.hand(key, as_text(reply[1]), Grant(True, token, since=sent))
            return True
        return bool(reply)

    def leave_args(self, key: str, owner: str) -> list[Any]:
        """The 5 keys and the arguments of the script's ``leave``."""
        lock_key = stored_key(key)
        keys = [*stored_keys(lock_key), grant_list(lock_key, owner_id(owner))]
        return [*keys, "leave", owner, self._floor]

    @staticmethod
    def on_record_args(operation: str, key: str, owner: str, ttl: float) -> list[Any]:
        """The key and arguments of ``extend`` or ``adopt``, which need only the record."""
        return [stored_key(key), operation, owner, max(1, int(ttl * 1000))]

    def adopt_answer(self, reply: Any) -> Grant:
        if not reply[0]:
            return Grant(False)
        return Grant(True, self.saw_token(int(reply[1])))
