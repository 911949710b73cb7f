"""``RedisBackend``: the error boundary, the lock operations (their call shapes are in
:mod:`.calls`), and the entry points of its batches (:mod:`.batches`), admin reads
(:mod:`.records`) and shared places (:mod:`.shared`)."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ...errors import BackendError, BackendUnavailable
from ...url import LockURL
from ..aio import AsyncOps
from ..base import Backend, Capability, Grade, Grant, Lease, Waiter
from .aio import RedisOps
from .batches import RunBatches
from .calls import LockCalls
from .clients import Clients, client_url
from .clients import from_client as clients_from_client
from .clients import from_url as clients_from_url
from .connect import check_tls_options, is_transient, warn_plain_password
from .leaver import ABANDONED_FOR, Leaver
from .listener import Listener
from .records import list_leases, read_leases
from .scripts import Script, stored_key, stored_keys
from .shared import RedisPlaces
from .waiter import RedisWaiter
from .wire import connections_for

if TYPE_CHECKING:
    import redis

__all__ = ["RedisBackend"]

T = TypeVar("T")

#: how long closing waits for the queues of waiters that just gave up to be left
LEAVE_AT_CLOSE = 1.0


class RedisBackend(LockCalls, Backend):
    """One Redis server (or one master behind a TLS or unix socket)."""

    schemes: ClassVar[tuple[str, ...]] = ("redis", "rediss", "unix")
    extra: ClassVar[str | None] = "redis"
    requires: ClassVar[str | None] = "redis"
    capabilities: ClassVar[Capability] = (
        Capability.TTL
        | Capability.FENCING
        | Capability.FAIR
        | Capability.NOTIFY
        | Capability.CROSS_PROCESS
        | Capability.CROSS_HOST
        | Capability.LIST
        | Capability.HAND_OFF
        | Capability.SHARED
    )
    grade: ClassVar[Grade] = Grade.SINGLE_NODE
    #: hand-over notices go over sharded pub/sub, on a channel in the lock's slot (cluster)
    sharded: ClassVar[bool] = False
    option_types: ClassVar[Mapping[str, type]] = {
        "socket_timeout": float,
        "socket_connect_timeout": float,
        "password": str,
        "username": str,
        "db": int,
        "max_connections": int,
        "health_check_interval": int,
        "ssl_ca_certs": str,
        "ssl_certfile": str,
        "ssl_keyfile": str,
        "ssl_cert_reqs": str,
        "ssl_check_hostname": bool,
        "client_name": str,
    }

    @classmethod
    def url_options(cls, url: LockURL) -> dict[str, Any]:
        """The user and password, and the ``/db`` of a ``redis://`` or ``rediss://`` path
        (``unix://`` paths name the socket; its db is ``?db=``)."""
        found = super().url_options(url)
        db = url.path.strip("/")
        if url.scheme != "unix" and db:
            found["db"] = db
        return found

    def __init__(
        self, url: LockURL, options: Mapping[str, Any], *, clients: Clients | None = None
    ) -> None:
        """``clients``: talk through these (``LockKit.from_redis``) instead of making them
        from the URL, which then only names the server in messages."""
        super().__init__(url, options)
        import redis as redis_module
        import redis.asyncio  # here, not on an event loop: the import takes milliseconds

        self._redis = redis_module
        if clients is None:
            check_tls_options(url, self.options)
            warn_plain_password(url, self.options)
            clients = self._clients_from_url(url)
        self._socket_timeout = clients.socket_timeout
        #: how the asyncio operations (:mod:`.aio`) make their client on each event loop
        self.make_async_client = clients.make_async
        self.client: redis.Redis = clients.client
        self.listener_client: redis.Redis = clients.listener
        self._shared_pool = clients.shared
        # One script, three call shapes: operations on a held lock need only its record;
        # acquire and leave also name the caller's grant list (lua/lock.lua, G).
        self._script = self.new_script(4)
        self._script_as_waiter = self.new_script(5)
        self._script_on_record = self.new_script(1)
        #: the connections a fair waiter blocks on for its grant (RedisWaiter.await_grant);
        #: None on a cluster, whose client has no one pool (its fair waiters take notices)
        self.grant_connections = (
            None if self.sharded else connections_for(self.client, give_back=self._shared_pool)
        )
        #: begin_run and end_run, one script call each
        self._batches = RunBatches(self)
        self._queued: dict[tuple[str, str], RedisWaiter] = {}
        # The highest fencing token this backend has seen on any key: no later grant is
        # lower, even when the server lost its counters and its clock is behind.
        self._floor = 0
        #: '<host> pid <pid>': which process holds a lease (made once; again after a fork)
        self._holder_here = f"{socket.gethostname()} pid {os.getpid()}"
        self._listener = Listener(self, sharded=self.sharded)
        #: leaves queues, and gives back what abandoned attempts may take, for owners gone
        self.leaver = Leaver(self.leave)
        #: read-write locks and semaphores (lua/shared.lua)
        self.places = RedisPlaces(self)
        self._aio: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RedisOps] = (
            weakref.WeakKeyDictionary()
        )

    def _clients_from_url(self, url: LockURL) -> Clients:
        """How this backend reaches its server(s); the Sentinel and Cluster backends differ."""
        return clients_from_url(url, self.options)

    def new_script(self, numkeys: int, name: str = "lock") -> Script:
        """The script ``lua/<name>.lua``, called with ``numkeys`` keys, on this backend's
        client."""
        return Script(self.client, name, numkeys, give_back=self._shared_pool)

    @classmethod
    def from_client(cls, client: Any) -> RedisBackend:
        """A backend on an app's own ``redis.Redis`` (or Sentinel master client): see
        :func:`.clients.from_client`."""
        from ...url import parse_url

        clients = clients_from_client(client)
        url = parse_url(client_url(client))
        if url.scheme == "redis+cluster" and not cls.sharded:
            from .cluster import RedisClusterBackend

            return RedisClusterBackend(url, {}, clients=clients)
        return cls(url, {}, clients=clients)

    # -- error boundary ------------------------------------------------------------------------

    def _call(
        self, what: str, func: Callable[[], T], *, retry: bool = False, key: str | None = None
    ) -> T:
        """Run one request; translate driver errors, naming ``what`` was being done (to
        ``key``: the message is made only if one is raised). ``retry`` retries once, at
        once, on a dropped connection (a pooled connection may predate a server restart):
        only for requests that are safe to repeat."""
        for attempt in (0, 1):
            try:
                return func()
            except (self._redis.exceptions.RedisError, TimeoutError) as exc:
                doing = what if key is None else f"{what} {key!r}"
                error = self.failure(doing, exc, may_retry=retry and attempt == 0)
                if error is None:
                    continue
                raise error from exc
        raise AssertionError("unreachable")

    def failure(self, what: str, exc: Exception, *, may_retry: bool) -> BackendError | None:
        """The error callers see for the driver's ``exc`` while trying to ``what``; None to
        retry at once (a dropped connection, when ``may_retry``). Used by the asyncio
        operations too (:mod:`.aio`)."""
        errors = self._redis.exceptions
        if isinstance(exc, errors.ConnectionError):
            if may_retry and not isinstance(exc, errors.AuthenticationError):
                return None
            return BackendUnavailable(f"cannot reach redis at {self.describe()} to {what}: {exc}")
        if isinstance(exc, (errors.TimeoutError, TimeoutError)):
            return BackendUnavailable(
                f"redis at {self.describe()} did not answer within "
                f"{self._socket_timeout:g} s to {what}: {exc}"
            )
        text = str(exc)
        if isinstance(exc, errors.ResponseError) and text.startswith(
            ("NOAUTH", "WRONGPASS", "NOPERM")
        ):
            return BackendUnavailable(f"redis at {self.describe()} refused our credentials: {text}")
        if isinstance(exc, errors.ResponseError) and is_transient(errors, exc):
            return BackendUnavailable(
                f"redis at {self.describe()} cannot {what} now (a replica, loading, "
                f"or its cluster is failing over): {text}"
            )
        return BackendError(f"redis at {self.describe()} failed to {what}: {text}")

    # -- locking ------------------------------------------------------------------------------

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        try:
            return self._try_acquire(key, owner, ttl)
        except BackendUnavailable:
            # The request may still reach the server when the link heals, and take the key
            # (or a place in its queue) for an owner that is gone: give it back meanwhile.
            self.leaver.give_back(key, owner, time.monotonic() + ABANDONED_FOR + 2 * ttl)
            raise

    def _try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        args = self.acquire_args(key, owner, ttl)
        sent = time.monotonic()
        waiter = self._queued.get((key, owner))
        if args[-1] == "3" and waiter is not None:
            reply = self._call("acquire", lambda: waiter.attempt(args), retry=True, key=key)
        else:
            reply = self._call(
                "acquire", lambda: self._script_as_waiter(*args), retry=True, key=key
            )
        return self.acquire_answer(key, owner, ttl, reply, sent)

    def release(self, key: str, owner: str) -> bool:
        args = self.release_args(key, owner, ours=True)
        sent = time.monotonic()
        reply = self._call("release", lambda: self._script(*args), key=key)
        return self.release_answer(key, reply, sent)

    def leave(self, key: str, owner: str) -> None:
        """Take ``owner`` out of the queue of ``key``; pass the lock on if it was handed to
        it, and give back a lease it holds."""
        args = self.leave_args(key, owner)
        self._call("leave the queue of", lambda: self._script_as_waiter(*args), retry=True, key=key)

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        args = self.on_record_args("extend", key, owner, ttl)
        return bool(
            self._call("extend", lambda: self._script_on_record(*args), retry=True, key=key)
        )

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        args = self.on_record_args("adopt", key, owner, ttl)
        reply = self._call("adopt", lambda: self._script_on_record(*args), retry=True, key=key)
        return self.adopt_answer(reply)

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        return RedisWaiter(self, key, owner, fair)

    def aio(self) -> AsyncOps:
        """``redis.asyncio`` on the running event loop: one client per loop, made on first
        use; hand-over notices come through the same listener as the blocking waiters'."""
        loop = asyncio.get_running_loop()
        ops = self._aio.get(loop)
        if ops is None:
            ops = self._aio[loop] = RedisOps(self)
        return ops

    def begin_run(
        self, run: str, run_owner: str, key: str, owner: str, ttl: float
    ) -> tuple[Grant, Grant]:
        grants = self._batches.begin(run, run_owner, key, owner, ttl)
        return super().begin_run(run, run_owner, key, owner, ttl) if grants is None else grants

    def end_run(
        self,
        releases: Sequence[tuple[str, str]],
        marker: tuple[str, str, float] | None = None,
        guard: tuple[str, str, float] | None = None,
    ) -> list[bool]:
        released = self._batches.end(releases, marker, guard)
        return super().end_run(releases, marker, guard) if released is None else released

    def queue_first(self) -> bool:
        # Once this process has waited (the listener is up), a blocking caller registers
        # before its first attempt, so a busy first attempt already queues it.
        return self._listener.healthy

    # -- read-write locks and semaphores (.shared) ---------------------------------------------

    def try_acquire_shared(self, key: str, owner: str, mode: str, limit: int, ttl: float) -> Grant:
        return self.places.try_acquire(key, owner, mode, limit, ttl)

    def release_shared(self, key: str, owner: str, mode: str) -> bool:
        return self.places.release(key, owner, mode)

    def extend_shared(self, key: str, owner: str, mode: str, ttl: float) -> bool:
        return bool(self.places.adopt(key, owner, mode, ttl, "extend"))

    def adopt_shared(self, key: str, owner: str, mode: str, ttl: float) -> Grant:
        grant: Grant = self.places.adopt(key, owner, mode, ttl)
        return grant

    def shared_waiter(self, key: str, owner: str, mode: str, limit: int) -> Waiter:
        return self.places.waiter(key, owner, mode, limit)

    def shared_holders(self, key: str, mode: str, limit: int) -> list[Lease]:
        return self.places.holders(key, mode)

    # -- admin --------------------------------------------------------------------------------

    def list(self, prefix: str) -> list[Lease]:
        return list_leases(self, prefix)

    def info(self, key: str) -> Lease | None:
        leases = read_leases(self, [stored_key(key)])
        return leases[0] if leases else None

    def force_release(self, key: str) -> bool:
        keys = stored_keys(stored_key(key))
        done = self._call(
            f"force-release {key!r}", lambda: self._script(*keys, "force", self._floor)
        )
        return bool(done)

    # -- lifecycle ----------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        # redis-py's pool notices the new pid and opens fresh connections; the listener
        # and leaver threads did not survive the fork, so start from new ones.
        self._listener = Listener(self, sharded=self.sharded)
        self.leaver = Leaver(self.leave)
        self._holder_here = f"{socket.gethostname()} pid {os.getpid()}"
        self.places.after_fork_in_child()

    def close(self) -> None:
        self._listener.close()
        # leaves still to do (waiters that just timed out) land before the connections close
        self.leaver.close(wait=LEAVE_AT_CLOSE)
        self.places.close(wait=LEAVE_AT_CLOSE)
        if not self._shared_pool:  # the app's client is the app's to close
            self.client.close()
        self.listener_client.close()
