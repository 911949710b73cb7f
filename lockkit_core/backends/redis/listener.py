"""The release listener: one pub/sub connection per backend on which hand-overs arrive."""

from __future__ import annotations

import logging
import random
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any

from .scripts import stored_key

if TYPE_CHECKING:
    from redis.client import PubSub

    from ..base import Grant
    from .backend import RedisBackend
    from .waiter import RedisWaiter

__all__ = ["Listener", "as_text"]

log = logging.getLogger("lockkit.redis")

#: after this long without a word from the server, the listener asks (PING) ...
QUIET = 0.5
#: ... and a connection that has not answered within this long is dead, whatever TCP says:
#: a half-open link (a dropped NAT entry, a paused proxy) never reports an error.
ANSWER_WITHIN = 0.5
#: the longest a notice may tell a waiter to wait before it asks the store again (the store
#: says PAUSE_MS, 2 ms, in lua/lock.lua): a forged one cannot put it to sleep for longer
MAX_PAUSE = 0.01


#: sharded: how long one read waits for a notice before new channels are subscribed
SHARDED_POLL = 0.005


class _Silent(Exception):
    """The server did not answer the listener in time."""


class Listener:
    """One pub/sub connection per backend, subscribed to a channel of its own on which the
    store tells this process that a lock was handed to one of its waiters. A notice is a
    wake-up, never proof: anyone who may publish can send one, so the waiter takes its grant
    and its fencing token from the store (:meth:`RedisWaiter.wait`).

    It runs only while someone waits (it stops after ``idle`` seconds without waiters). It
    checks its connection whenever the server has been quiet for ``QUIET`` seconds, so a link
    that died silently costs waiters about a second, not a lease; while it is down, waiters
    poll with short backoff (``RedisWaiter.wait``).

    ``sharded`` (Redis Cluster): a plain PUBLISH would cross the whole cluster bus, so each
    key waited on gets a channel of its own in the key's hash slot (``channel_for``), which
    this listener SSUBSCRIBEs on the node serving that slot while a waiter of this process
    waits on it; the script SPUBLISHes there. No PING checks on that connection (one per
    node): a half-open link is noticed by the waiters' own attempts, each at the latest when
    the lease they were told of runs out.
    """

    def __init__(self, backend: RedisBackend, idle: float = 30.0, *, sharded: bool = False) -> None:
        self._backend = backend
        self._idle = idle
        self._lock = threading.Lock()
        self._sharded = sharded
        self._token = secrets.token_hex(8)
        self.channel = "lockkit:w:" + self._token
        #: sharded: channel -> how many of our waiters wait on it; the ones subscribed to
        self._wanted: dict[str, int] = {}
        self._subscribed: set[str] = set()
        self._waiters: dict[str, RedisWaiter] = {}  # by owner id
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()  # subscribed and reading
        self._closed = False

    @property
    def healthy(self) -> bool:
        return self._ready.is_set()

    @property
    def waiting(self) -> bool:
        """Whether any waiter of this process is registered (a lock may be handed to it)."""
        return bool(self._waiters)

    def channel_for(self, key: str) -> str:
        """The channel on which the store tells this process that ``key`` was handed over:
        one per process, or (``sharded``) one per key in the key's hash slot."""
        if not self._sharded:
            return self.channel
        return stored_key(key) + ":w:" + self._token

    def register(self, waiter: RedisWaiter) -> None:
        with self._lock:
            self._waiters[waiter.id] = waiter
            if self._sharded:
                channel = self.channel_for(waiter.key)
                self._wanted[channel] = self._wanted.get(channel, 0) + 1
            self._ensure_running()

    def unregister(self, waiter: RedisWaiter) -> None:
        """Forget ``waiter``. One that gave up while queued has its queue left by the
        backend's leaver, which also passes on a lock handed to it before that lands; a
        notice for it meanwhile is ignored here."""
        with self._lock:
            if self._waiters.get(waiter.id) is waiter:
                del self._waiters[waiter.id]
                if self._sharded:
                    channel = self.channel_for(waiter.key)
                    left = self._wanted.get(channel, 1) - 1
                    if left > 0:
                        self._wanted[channel] = left
                    else:
                        self._wanted.pop(channel, None)

    def _ensure_running(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(
                target=self._run, name="lockkit-redis-listener", daemon=True
            )
            self._thread.start()

    def ready_for(self, key: str) -> bool:
        """Whether a notice for a waiter on ``key`` can arrive now."""
        if not self._sharded:
            return self._ready.is_set()
        return self._ready.is_set() and self.channel_for(key) in self._subscribed

    def wait_ready(self, timeout: float, key: str | None = None) -> bool:
        """Wait up to ``timeout`` until notices can arrive (for ``key``'s channel, sharded)."""
        if not self._sharded or key is None:
            return self._ready.wait(timeout)
        until = time.monotonic() + timeout
        while not self.ready_for(key) and time.monotonic() < until:
            time.sleep(0.001)
        return self.ready_for(key)

    def _wake_all(self) -> None:
        with self._lock:
            for waiter in self._waiters.values():
                waiter.event.set()

    def _handed(self, payload: str) -> None:
        """A notice for one of our waiters. Whoever may PUBLISH can send one (the waiter's id
        and our channel are readable in its queue entry), so it only wakes the waiter:

        * ``<owner id>|<token>``: the lock may have been handed to it. It asks the store,
          which answers with its lease and token if so; the token here is never used.
        * ``<owner id>|@<ms>``: the lock was freed past it; it asks again in ``ms``, at most
          :data:`MAX_PAUSE` from now (the store sends a few ms), and never later than it
          meant to already.

        Anything else is dropped (and never raises: this runs on the listener's thread)."""
        owner, _, word = payload.partition("|")
        ask = word.startswith("@")
        number = word[1:] if ask else word
        if not (0 < len(number) <= 20 and number.isascii() and number.isdigit()):
            return
        with self._lock:
            waiter = self._waiters.get(owner)
            if waiter is None:
                return
            if ask:
                # sooner, never later than it meant to ask: a notice cannot put it off
                at = time.monotonic() + min(int(number) / 1000.0, MAX_PAUSE)
                if waiter.ask_at is None or at < waiter.ask_at:
                    waiter.ask_at = at
            else:
                waiter.handed = True
            waiter.event.set()

    def hand(self, key: str, waiter_id: str, grant: Grant) -> None:
        """A release of this process was answered with a lock handed to our waiter
        ``waiter_id``: the store's reply is its grant (unlike a notice, nobody else can send
        it), so the waiter takes it without a round trip. One that has left meanwhile is not
        here: its leave, on its way from its close, passes the lock on."""
        with self._lock:
            waiter = self._waiters.get(waiter_id)
            if waiter is None or waiter.key != key:
                return
            waiter.granted = grant
            waiter.event.set()

    def _idle_now(self) -> bool:
        with self._lock:
            return not self._waiters

    def _stop_if_idle(self, idle_since: float) -> tuple[float, bool]:
        """(the new idle-since time, whether the thread should end now)."""
        now = time.monotonic()
        if not self._idle_now():
            return now, False
        if now - idle_since > self._idle:
            with self._lock:
                if not self._waiters:
                    self._thread = None
                    return idle_since, True
        return idle_since, False

    def _run_sharded(self) -> None:
        """The ``sharded`` loop: keep one SSUBSCRIBE per channel wanted, on its slot's node."""
        backoff = 0.05
        idle_since = time.monotonic()
        pubsub: Any = None
        try:
            while not self._closed:
                try:
                    if pubsub is None:
                        pubsub = self._backend.listener_client.pubsub()  # type: ignore[no-untyped-call]
                        self._ready.set()
                    with self._lock:
                        wanted = set(self._wanted)
                    for channel in wanted - self._subscribed:
                        # sent before any attempt of its waiter (see wait_ready), so the
                        # node has it before the script can SPUBLISH there
                        pubsub.ssubscribe(channel)
                        self._subscribed.add(channel)
                    for channel in self._subscribed - wanted:
                        pubsub.sunsubscribe(channel)
                        self._subscribed.discard(channel)
                    if self._subscribed:
                        # short: a channel wanted meanwhile is subscribed only between reads
                        message = pubsub.get_sharded_message(timeout=SHARDED_POLL)
                    else:
                        message = None
                        time.sleep(0.01)
                    backoff = 0.05
                except Exception as exc:  # any failure: drop the connections, wake, reconnect
                    if self._closed:
                        break
                    self._ready.clear()
                    self._subscribed.clear()
                    self._wake_all()
                    if backoff == 0.05:
                        log.warning("redis release listener lost a connection: %s", exc)
                    if pubsub is not None:
                        _quiet_close(pubsub)
                        pubsub = None
                    _refresh_topology(self._backend.listener_client)
                    time.sleep(backoff * random.uniform(0.5, 1.5))
                    backoff = min(1.0, backoff * 2)
                    message = None
                if message is not None and message.get("type") in ("smessage", b"smessage"):
                    self._handed(as_text(message["data"]))
                idle_since, stop = self._stop_if_idle(idle_since)
                if stop:
                    return
        finally:
            self._ready.clear()
            self._subscribed.clear()
            if pubsub is not None:
                _quiet_close(pubsub)

    def _run(self) -> None:
        if self._sharded:
            self._run_sharded()
            return
        backoff = 0.05
        idle_since = heard = time.monotonic()
        asked: float | None = None  # when we asked (SUBSCRIBE or PING) and had no answer yet
        pubsub: PubSub | None = None
        try:
            while not self._closed:
                try:
                    if pubsub is None:
                        client = self._backend.listener_client
                        pubsub = client.pubsub()  # type: ignore[no-untyped-call]
                        pubsub.subscribe(self.channel)
                        asked = time.monotonic()
                    message = pubsub.get_message(timeout=0.1)
                    now = time.monotonic()
                    if message is not None:
                        heard, asked = now, None
                    elif asked is not None:
                        if now - asked > ANSWER_WITHIN:
                            raise _Silent(f"no answer within {ANSWER_WITHIN:g} s")
                    elif now - heard > QUIET:
                        pubsub.ping()
                        asked = now
                except Exception as exc:  # any failure: drop the connection, wake, reconnect
                    if self._closed:
                        break
                    self._ready.clear()
                    self._wake_all()
                    if backoff == 0.05:  # first failure of a streak
                        log.warning("redis release listener lost its connection: %s", exc)
                    if pubsub is not None:
                        _quiet_close(pubsub)
                        pubsub = None
                    asked = None
                    time.sleep(backoff * random.uniform(0.5, 1.5))
                    backoff = min(1.0, backoff * 2)
                    message = None
                if message is not None:
                    kind = message["type"]
                    if kind == "subscribe":
                        backoff = 0.05
                        self._ready.set()
                        self._wake_all()  # anything handed to us while we were away
                    elif kind == "message":
                        self._handed(as_text(message["data"]))
                now = time.monotonic()
                if not self._idle_now():
                    idle_since = now
                elif now - idle_since > self._idle:
                    with self._lock:
                        if not self._waiters:
                            self._thread = None
                            return
        finally:
            self._ready.clear()
            if pubsub is not None:
                _quiet_close(pubsub)

    def close(self) -> None:
        self._closed = True


def as_text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _refresh_topology(client: Any) -> None:
    """Ask a cluster client to learn the slots again (after a failover the dead node's slots
    have a new master); nothing for other clients."""
    nodes = getattr(client, "nodes_manager", None)
    if nodes is None:
        return
    try:
        nodes.initialize()
    except Exception as exc:  # the cluster may still be electing: the next failure retries
        log.debug("refreshing the cluster's slots failed: %s", exc)


def _quiet_close(pubsub: Any) -> None:
    try:
        pubsub.close()
    except Exception as exc:  # closing a broken connection may fail again; nothing to save
        log.debug("closing the release listener failed: %s", exc)
