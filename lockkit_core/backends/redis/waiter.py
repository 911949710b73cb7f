"""A caller queued on one key: handed the lock by its grant list, by the reply to a release of
its own process, or woken by a notice, which it then confirms with the store."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Protocol

from ...sansio import run
from ..base import Grant, Waiter
from .scripts import owner_id, stored_key
from .wire import Packer

if TYPE_CHECKING:
    from .backend import RedisBackend

__all__ = ["CONFIRM", "Confirm", "RedisWaiter", "Wakeable"]

_BLPOP = Packer(("BLPOP",))
#: how long a new waiter gives the listener to subscribe before its first attempt
READY_WITHIN = 0.05


class Wakeable(Protocol):
    """What the listener's thread sets on a notice for a waiter."""

    def set(self) -> None: ...


class Confirm:
    """A step of :meth:`RedisWaiter.waiting`: make one attempt, as the caller would."""


CONFIRM = Confirm()


class RedisWaiter(Waiter):
    """Queued for one key: woken by the notice that hands it the lock, or that frees it; a
    notice is never taken as the grant itself (see :meth:`_confirm`). A blocking ``fair=True``
    waiter instead reads its grant from the store (:meth:`RedisBackend.await_grant`)."""

    #: whether the store pushes this waiter's grant to a list it can block on
    grant_list = True

    def __init__(
        self,
        backend: RedisBackend,
        key: str,
        owner: str,
        fair: bool,
        event: Wakeable | None = None,
    ) -> None:
        self._backend = backend
        self._listener = backend._listener
        self.key = key
        self.owner = owner
        self.fair = fair  # False: others may take the lock past us, boundedly (lua/lock.lua)
        #: (monotonic) when the store said to ask again: a head that may be passed over is
        #: not told of every release, only when to ask (lua/lock.lua, bounded barging)
        self.ask_at: float | None = None
        self.id = owner_id(owner)  # what the server and the notices know it by
        #: set by the listener's thread on a notice; a threading.Event unless ``event`` (an
        #: asyncio waiter's, which wakes its loop) is given
        self._blocking = threading.Event() if event is None else None
        self.event: Wakeable = event or self._blocking  # type: ignore[assignment]
        #: a notice said the lock was handed to us: ask the store (never taken as a grant)
        self.handed = False
        #: the grant a release of this process handed us, from the store's reply (set by the
        #: listener's :meth:`~.listener.Listener.hand`)
        self.granted: Grant | None = None
        #: the ttl of our attempts, which a confirming attempt asks for again
        self.ttl: float | None = None
        self.queued_at: float | None = None  # send time of the first attempt that queued us
        self.entry_until = 0.0  # (monotonic) when our queue entry expires on the server
        self._backoff = 0.002
        backend._queued[(key, owner)] = self
        self._listener.register(self)
        if event is None:
            # The attempt that follows must come after the subscription, or a hand-over in
            # between would go unnoticed until the holder's lease ran out. Until the listener
            # is subscribed, wait() falls back to short backoff, so this wait stays short.
            self._listener.wait_ready(READY_WITHIN, key)

    def listening(self, timeout: float = 0.0) -> bool:
        """True once the backend's listener is subscribed (notices can reach this waiter),
        waiting up to ``timeout`` for it; for a caller that waits on its own ``event``."""
        return self._listener.wait_ready(timeout)

    @property
    def reads_grants(self) -> bool:
        """Whether a release pushes our grant to our grant list, which :meth:`wait` blocks
        on (a blocking ``fair=True`` waiter off Cluster), rather than telling us on pub/sub."""
        return (
            self.grant_list
            and self._backend.grant_connections is not None
            and self.fair
            and self._blocking is not None
        )

    def wait(self, timeout: float) -> Grant | None:
        # A queued fair=True blocking waiter reads the grant the release pushes for it
        # (lua/lock.lua, hand_over), from the store; the listener being up means its channel
        # is subscribed, so a release that asks (PUBSUB NUMSUB) counts it alive and pushes.
        if self.reads_grants and self.queued_at is not None and self._listener.healthy:
            return self._await_grant(timeout)
        return run(self.waiting(timeout), self._step)

    def _await_grant(self, timeout: float) -> Grant | None:
        """Wait up to ``timeout`` for the grant a release hands this queued ``fair=True``
        waiter (``lua/lock.lua`` pushes its token to the waiter's grant list): one blocking
        read, so the hand-over costs no notice hop through the listener and no confirming
        round trip. The lease is counted from before the wait began (the hand-over came
        after it)."""
        backend = self._backend
        # below the socket timeout, or the read would time out before the server answers
        seconds = min(timeout, backend._socket_timeout / 2)
        if seconds < 0.002:
            return None
        sent = time.monotonic()
        packed = _BLPOP.pack((stored_key(self.key) + ":g:" + self.id, f"{seconds:.3f}"))
        connections = backend.grant_connections
        assert connections is not None  # checked by wait()
        # The reply comes a round trip after the server's timeout: past ``timeout`` the
        # connection is dropped and the caller keeps its time. A grant it carried is then
        # passed on by the caller's next attempt (its own lock: kept) or its leave.
        reply = backend._call(
            f"wait for {self.key!r}", lambda: connections.call(packed, within=timeout)
        )
        if reply is None:
            return None
        return Grant(True, backend.saw_token(int(reply[1])), since=sent)

    def _step(self, step: float | Confirm) -> Grant | None:
        if isinstance(step, Confirm):
            assert self.ttl is not None
            return self._backend.try_acquire(self.key, self.owner, self.ttl)
        assert self._blocking is not None
        self._blocking.wait(step)
        self._blocking.clear()
        return None

    def waiting(self, timeout: float) -> Generator[float | Confirm, Grant | None, Grant | None]:
        """The decisions of one ``wait``, sans I/O (:mod:`lockkit_core.sansio`): it yields a
        pause (wait on ``event`` up to that long, then clear it; sent None) or
        :data:`CONFIRM` (one attempt, as the caller's; sent its Grant). ``wait`` runs it
        blocking, :class:`~.aio.AsyncRedisWaiter` on an event loop."""
        if not self._listener.healthy:
            # No notice can arrive while the listener is down: poll, with a bounded delay.
            timeout = min(timeout, self._backoff * random.uniform(0.5, 1.5))
            self._backoff = min(0.1, self._backoff * 2)
        until = time.monotonic() + timeout
        while True:
            granted = self.granted
            if granted is not None:
                self.granted = None
                return granted
            now = time.monotonic()
            # told when to ask again ('<id>|@<ms>', or a busy answer's): no sooner, no later
            ask_at = self.ask_at
            if not self.handed and ask_at is not None and ask_at <= now:
                self.ask_at = None
                return None
            yield max(0.0, min(until, ask_at or until) - now)
            if self.granted is not None:
                continue  # taken at the top
            if self.handed:
                self.handed = False
                return (yield from self._confirm())
            if self.ask_at is None or self.ask_at == ask_at or time.monotonic() >= until:
                return None  # woken to ask, or our time is up

    def _confirm(self) -> Generator[Confirm, Grant | None, Grant | None]:
        """A notice says the lock was handed to us. Anyone who may publish can say so, so
        the store decides, in the attempt the caller would make next anyway: it renews and
        returns our lease and its token when the lock is ours, and otherwise keeps our place
        and says how long to wait. Its answer is returned even past the caller's timeout:
        a lease handed to us is kept while valid, never left to run out."""
        if self.ttl is None:
            return None  # not queued yet: the caller's next attempt asks the store anyway
        sent = time.monotonic()
        grant = yield CONFIRM
        assert grant is not None
        if grant.acquired:
            return Grant(True, grant.token, since=sent)
        return grant

    def forget(self) -> None:
        """Stop being told of hand-overs (the queue entry is another matter: see close)."""
        self._backend._queued.pop((self.key, self.owner), None)
        self._listener.unregister(self)

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self.forget()
        if not acquired and self.queued_at is not None:
            # Its time is up, or the store just failed: either way no round trip now (it
            # would be spent past the caller's timeout). The queue is left in the background
            # once the store answers, which also passes on a lock handed to it meanwhile.
            self._backend.leaver.leave(self.key, self.owner, self.entry_until)
