"""``redis://``, ``rediss://`` (TLS) and ``unix://``: one Redis server through redis-py.

Every operation is one round trip: a Lua script (``lua/*.lua``, loaded once and run by
EVALSHA, reloaded on NOSCRIPT) that compares the owner token and acts atomically.

Waiting is a queue, not polling and not a stampede: a blocking caller that finds the key busy
joins the key's queue in the same script call; a release hands the lock straight to the oldest
live waiter (with a new fencing token) and publishes ``<owner>|<token>`` on that waiter's
process channel only. One listener thread per backend, subscribed to its own channel, wakes
the waiter named, which can start at once: the lock is already its own. So waiters are
served in arrival order (``fair=True`` comes for free), and a hand-over costs no extra round
trip and wakes no other process. Each wait is still bounded by the holder's remaining
lease, so a lost notice costs at most that long, and while the listener is reconnecting
waiters fall back to short backoff.

The stored keys are ``lockkit:{<namespace>:<key>}`` with ``:q`` and ``:e`` beside it for the
queue (the braces keep them in one cluster slot), the counter ``lockkit:fence`` (one per
database, so tokens strictly increase per key and no per-key counter is left behind; it
restarts from the server clock in microseconds if lost), and one notice channel per waiting
process, ``lockkit:w:<random>``.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import urlsplit, urlunsplit

from ..errors import BackendError, BackendUnavailable
from ..url import LockURL
from .base import Backend, Capability, Grade, Grant, Lease, Waiter

if TYPE_CHECKING:
    import redis
    from redis.client import PubSub

__all__ = ["RedisBackend"]

log = logging.getLogger("lockkit.redis")

T = TypeVar("T")

PREFIX = "lockkit:{"
FENCE_KEY = "lockkit:fence"


def _script(name: str) -> str:
    lua = resources.files("lockkit_core.backends").joinpath("lua")
    body = lua.joinpath(f"{name}.lua").read_text()
    if name == "extend":
        return body
    return lua.joinpath("handoff.lua").read_text() + "\n" + body


def _lock_key(full_key: str) -> str:
    return PREFIX + full_key + "}"


def _keys(lock_key: str) -> list[str]:
    return [lock_key, FENCE_KEY, lock_key + ":q", lock_key + ":e"]


class _Script:
    """A Lua script run by EVALSHA, loaded again if the server lost it (NOSCRIPT). Calls
    pass its ``numkeys`` keys, then its arguments, flat."""

    def __init__(self, client: redis.Redis, name: str, numkeys: int) -> None:
        from redis.exceptions import NoScriptError

        self._client = client
        self._noscript = NoScriptError
        self.source = _script(name)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()  # noqa: S324 (Redis' id)
        self.numkeys = numkeys

    def __call__(self, *keys_and_args: Any) -> Any:
        try:
            return self._client.evalsha(self.sha, self.numkeys, *keys_and_args)
        except self._noscript:
            self.sha = self._client.script_load(self.source)
            return self._client.evalsha(self.sha, self.numkeys, *keys_and_args)


class _Listener:
    """One pub/sub connection per backend, subscribed to a channel of its own on which the
    store tells this process that a lock was handed to one of its waiters.

    It runs only while someone waits (it stops after ``idle`` seconds without waiters).
    """

    def __init__(self, backend: RedisBackend, idle: float = 30.0) -> None:
        self._backend = backend
        self._idle = idle
        self._lock = threading.Lock()
        self.channel = "lockkit:w:" + secrets.token_hex(8)
        self._waiters: dict[str, _RedisWaiter] = {}  # by owner token
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()  # subscribed and reading
        self._closed = False

    @property
    def healthy(self) -> bool:
        return self._ready.is_set()

    def register(self, waiter: _RedisWaiter) -> None:
        with self._lock:
            self._waiters[waiter.owner] = waiter
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="lockkit-redis-listener", daemon=True
                )
                self._thread.start()

    def unregister(self, waiter: _RedisWaiter) -> None:
        with self._lock:
            if self._waiters.get(waiter.owner) is waiter:
                del self._waiters[waiter.owner]

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def _wake_all(self) -> None:
        with self._lock:
            for waiter in self._waiters.values():
                waiter.event.set()

    def _handed(self, payload: str) -> None:
        """``<owner>|<token>``: the lock was handed to that waiter of ours."""
        owner, _, token = payload.partition("|")
        with self._lock:
            waiter = self._waiters.get(owner)
            if waiter is not None and token.isdigit():
                waiter.handed = int(token)
                waiter.event.set()

    def _run(self) -> None:
        backoff = 0.05
        idle_since = time.monotonic()
        pubsub: PubSub | None = None
        try:
            while not self._closed:
                try:
                    if pubsub is None:
                        client = self._backend.listener_client
                        pubsub = client.pubsub()  # type: ignore[no-untyped-call]
                        pubsub.subscribe(self.channel)
                    message = pubsub.get_message(timeout=0.5)
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
                    time.sleep(backoff * random.uniform(0.5, 1.5))
                    backoff = min(1.0, backoff * 2)
                    message = None
                else:
                    backoff = 0.05
                if message is not None:
                    kind = message["type"]
                    if kind == "subscribe":
                        self._ready.set()
                        self._wake_all()  # anything handed to us while we were away
                    elif kind == "message":
                        self._handed(_text(message["data"]))
                with self._lock:
                    if self._waiters:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > self._idle:
                        self._thread = None
                        return
        finally:
            self._ready.clear()
            if pubsub is not None:
                _quiet_close(pubsub)

    def close(self) -> None:
        self._closed = True


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _quiet_close(pubsub: PubSub) -> None:
    try:
        pubsub.close()
    except Exception as exc:  # closing a broken connection may fail again; nothing to save
        log.debug("closing the release listener failed: %s", exc)


class _RedisWaiter(Waiter):
    """Queued for one key: woken by the notice that hands it the lock, or that frees it."""

    def __init__(self, backend: RedisBackend, key: str, owner: str) -> None:
        self._backend = backend
        self._listener = backend._listener
        self.key = key
        self.owner = owner
        self.event = threading.Event()
        self.handed: int | None = None
        self.queued_at: float | None = None  # send time of the first attempt that queued us
        self._backoff = 0.002
        backend._queued[(key, owner)] = self
        self._listener.register(self)
        # The attempt that follows must come after the subscription, or a hand-over in
        # between would go unnoticed until the holder's lease ran out. Until the listener
        # is subscribed, wait() falls back to short backoff, so this wait stays short.
        self._listener.wait_ready(0.05)

    def wait(self, timeout: float) -> Grant | None:
        if not self._listener.healthy:
            timeout = min(timeout, self._backoff * random.uniform(0.5, 1.5))
            self._backoff = min(0.1, self._backoff * 2)
        self.event.wait(timeout)
        self.event.clear()
        token, self.handed = self.handed, None
        if token is None or self.queued_at is None:
            return None
        return Grant(True, token, since=self.queued_at)

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self._listener.unregister(self)
        self._backend._queued.pop((self.key, self.owner), None)
        if not acquired and self.queued_at is not None:
            self._backend._leave(self.key, self.owner)


class RedisBackend(Backend):
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
    )
    grade: ClassVar[Grade] = Grade.SINGLE_NODE
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

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        import redis as redis_module
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._redis = redis_module
        kwargs: dict[str, Any] = {
            "socket_timeout": 5.0,
            "socket_connect_timeout": 5.0,
            # RESP2 and no CLIENT SETINFO: a new connection (after a restart, or for the
            # listener) costs one round trip less than four.
            "protocol": 2,
        }
        if "driver_info" in inspect.signature(redis_module.Redis.__init__).parameters:
            kwargs["driver_info"] = None
        else:  # redis-py before 7
            kwargs.update(lib_name=None, lib_version=None)
        kwargs.update(self.options)
        # No driver retries: they would stretch the caller's timeout. We retry idempotent
        # calls once ourselves (see _call).
        kwargs["retry"] = Retry(NoBackoff(), 0)
        kwargs["retry_on_error"] = []
        self._socket_timeout = float(kwargs["socket_timeout"])
        parts = urlsplit(url.raw)
        bare = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        try:
            self.client: redis.Redis = redis_module.Redis.from_url(bare, **kwargs)
            # The release listener has a pool of its own: taking a warm connection from the
            # command pool would make the next attempt open (and handshake) a new one.
            self.listener_client: redis.Redis = redis_module.Redis.from_url(bare, **kwargs)
        except (ValueError, TypeError) as exc:
            from ..errors import ConfigError

            raise ConfigError(f"bad redis URL or option for {url.redacted()}: {exc}") from exc
        self._acquire = _Script(self.client, "acquire", 4)
        self._release = _Script(self.client, "release", 4)
        self._extend = _Script(self.client, "extend", 1)
        self._force_release = _Script(self.client, "force_release", 4)
        self._leave_script = _Script(self.client, "leave", 4)
        self._queued: dict[tuple[str, str], _RedisWaiter] = {}
        self._holder = f"{socket.gethostname()} pid "
        self._listener = _Listener(self)

    # -- error boundary ------------------------------------------------------------------------

    def _call(self, what: str, func: Callable[[], T], *, retry: bool = False) -> T:
        """Run one request; translate driver errors. ``retry`` retries once, at once, on a
        dropped connection (a pooled connection may predate a server restart): only for
        requests that are safe to repeat."""
        errors = self._redis.exceptions
        for attempt in (0, 1):
            try:
                return func()
            except errors.ConnectionError as exc:
                if retry and attempt == 0 and not isinstance(exc, errors.AuthenticationError):
                    continue
                raise BackendUnavailable(
                    f"cannot reach redis at {self.describe()} to {what}: {exc}"
                ) from exc
            except errors.TimeoutError as exc:
                raise BackendUnavailable(
                    f"redis at {self.describe()} did not answer within "
                    f"{self._socket_timeout:g} s to {what}: {exc}"
                ) from exc
            except errors.ResponseError as exc:
                text = str(exc)
                if text.startswith(("NOAUTH", "WRONGPASS", "NOPERM")):
                    raise BackendUnavailable(
                        f"redis at {self.describe()} refused our credentials: {text}"
                    ) from exc
                raise BackendError(f"redis at {self.describe()} failed to {what}: {text}") from exc
            except errors.RedisError as exc:
                raise BackendError(f"redis at {self.describe()} failed to {what}: {exc}") from exc
        raise AssertionError("unreachable")

    # -- locking ------------------------------------------------------------------------------

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        lock_key = _lock_key(key)
        ms = max(1, int(ttl * 1000))
        holder = self._holder + str(os.getpid())
        waiter = self._queued.get((key, owner))
        channel = self._listener.channel if waiter is not None else ""
        sent = time.monotonic()
        granted, value = self._call(
            f"acquire {key!r}",
            lambda: self._acquire(*_keys(lock_key), owner, ms, holder, channel),
            retry=True,
        )
        if granted:
            return Grant(True, int(value))
        if waiter is not None and waiter.queued_at is None:
            waiter.queued_at = sent
        pttl = int(value)
        return Grant(False, retry_after=pttl / 1000.0 if pttl > 0 else None)

    def release(self, key: str, owner: str) -> bool:
        lock_key = _lock_key(key)
        done = self._call(
            f"release {key!r}",
            lambda: self._release(*_keys(lock_key), owner),
        )
        return bool(done)

    def _leave(self, key: str, owner: str) -> None:
        lock_key = _lock_key(key)
        self._call(
            f"leave the queue of {key!r}",
            lambda: self._leave_script(*_keys(lock_key), owner),
            retry=True,
        )

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        lock_key = _lock_key(key)
        ms = max(1, int(ttl * 1000))
        done = self._call(f"extend {key!r}", lambda: self._extend(lock_key, owner, ms), retry=True)
        return bool(done)

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        return _RedisWaiter(self, key, owner)

    def queue_first(self) -> bool:
        # Once this process has waited (the listener is up), a blocking caller registers
        # before its first attempt, so a busy first attempt already queues it.
        return self._listener.healthy

    # -- admin --------------------------------------------------------------------------------

    @staticmethod
    def _parse(stored_key: str, value: bytes | str | None, pttl: int) -> Lease | None:
        if value is None:
            return None
        text = _text(value)
        owner, _, rest = text.partition("|")
        token_text, _, holder = rest.partition("|")
        return Lease(
            key=stored_key,
            owner_hint=owner[:8],
            token=int(token_text) if token_text.isdigit() else None,
            ttl_remaining=pttl / 1000.0 if pttl >= 0 else None,
            holder=holder or None,
        )

    def _leases(self, lock_keys: list[str]) -> list[Lease]:
        def fetch() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for lock_key in lock_keys:
                pipe.get(lock_key)
                pipe.pttl(lock_key)
            return pipe.execute()

        replies = self._call("read locks", fetch, retry=True)
        leases = []
        for i, lock_key in enumerate(lock_keys):
            lease = self._parse(lock_key[len(PREFIX) : -1], replies[2 * i], replies[2 * i + 1])
            if lease is not None:
                leases.append(lease)
        return leases

    def list(self, prefix: str) -> list[Lease]:
        pattern = PREFIX + _glob_escape(prefix) + "*}"

        def scan() -> list[str]:
            found = []
            for raw in self.client.scan_iter(match=pattern, count=1000, _type="string"):
                name = _text(raw)
                if name.endswith("}"):
                    found.append(name)
            return found

        lock_keys = sorted(set(self._call("list locks", scan, retry=True)))
        return self._leases(lock_keys) if lock_keys else []

    def info(self, key: str) -> Lease | None:
        leases = self._leases([_lock_key(key)])
        return leases[0] if leases else None

    def force_release(self, key: str) -> bool:
        lock_key = _lock_key(key)
        done = self._call(
            f"force-release {key!r}",
            lambda: self._force_release(*_keys(lock_key)),
        )
        return bool(done)

    # -- lifecycle ----------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        # redis-py's pool notices the new pid and opens fresh connections; the listener
        # thread did not survive the fork, so start from a new one.
        self._listener = _Listener(self)

    def close(self) -> None:
        self._listener.close()
        self.client.close()
        self.listener_client.close()


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)
