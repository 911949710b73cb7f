"""A caller queued on one key: handed the lock by its grant list, by the reply to a release of
its own process, or woken by a notice, which it then confirms with the store."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Protocol

from ...sansio import run
from ..base import Grant, Waiter
from .scripts import grant_list, owner_id, stored_key
from .wire import Packer, Pending

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
        #: the read of our grant list sent with our last attempt (:meth:`attempt`), and when
        self._pending: Pending | None = None
        self._pending_sent = 0.0
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

    @property
    def pipelines(self) -> bool:
        """Whether our attempts carry our read of the grant list in the same write
        (:meth:`attempt`): a waiter that :attr:`reads_grants`, once notices can reach its
        process (a release counts it alive only then), on connections this backend reads."""
        connections = self._backend.grant_connections
        return (
            self.reads_grants
            and connections is not None
            and connections.pipelines
            and self._listener.healthy
        )

    def attempt(self, args: list[Any]) -> Any:
        """The script's ``acquire`` with ``args`` (fair '3') and, in the same write, our
        read of the grant list (BLPOP): its reply. A busy answer leaves that read to come,
        for :meth:`wait` (no round trip more to start waiting); a grant went to the list too
        (``lua/lock.lua``), so the read returns at once and is done here. Raises redis-py's
        errors, as a script call does."""
        backend = self._backend
        connections = backend.grant_connections
        assert connections is not None  # see pipelines
        script = backend._script_as_waiter
        seconds = backend._socket_timeout / 2  # the read must end before the socket times out
        read = _BLPOP.pack((grant_list(stored_key(self.key), self.id), f"{seconds:.3f}"))
        self._drop_pending()
        for loaded in (False, True):
            self._pending_sent = time.monotonic()
            reply, pending = connections.call_pair(script.pack(*args) + read)
            if isinstance(reply, Exception):
                pending.drop()
                if isinstance(reply, script.noscript) and not loaded:
                    script.load()
                    continue
                raise reply
            if reply[0]:
                pending.read(within=seconds)  # the token we have in the reply
            else:
                self._pending = pending
            return reply
        raise AssertionError("unreachable")

    def _drop_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.drop()

    def wait(self, timeout: float) -> Grant | None:
        pending = self._pending
        if pending is not None:
            self._pending = None
            return self._read_grant(pending, timeout)
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

    def _read_grant(self, pending: Pending, timeout: float) -> Grant | None:
        """Wait up to ``timeout`` for the reply of the read sent with our last attempt: a
        grant, counted from when that was sent, or None (the read timed out on the server,
        or nothing came in time and its connection was dropped; a grant it carried is then
        passed on as in :meth:`_await_grant`)."""
        backend = self._backend
        reply = backend._call(f"wait for {self.key!r}", lambda: pending.read(within=timeout))
        if reply is None:
            return None
        return Grant(True, backend.saw_token(int(reply[1])), since=self._pending_sent)

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
        """Stop being told of hand-overs (the queue entry is another matter: see close), and
        drop a read of our grant list still to come."""
        self._drop_pending()
        self._backend._queued.pop((self.key, self.owner), None)
        self._listener.unregister(self)

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self.forget()
        if not acquired and self.queued_at is not None:
            # Its time is up, or the store just failed: either way no round trip now (it
            # would be spent past the caller's timeout). The queue is left in the background
            # once the store answers, which also passes on a lock handed to it meanwhile.
            self._backend.leaver.leave(self.key, self.owner, self.entry_until)
