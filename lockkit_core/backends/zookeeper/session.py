"""``Session``: the one kazoo client of a backend, its error boundary and its session events.

The client is started on first use and stopped by ``close()``. Every request goes through
:meth:`Session.call`, which bounds it by the socket timeout and translates kazoo's errors. A
request made while the connection is down fails at once (``BackendUnavailable``) rather than
being queued by kazoo and sent after the caller has given up.

Holders learn of the session's fate here: when the connection drops (SUSPENDED) the session may
expire on the server within a third of its timeout (kazoo notices a silent link after two
thirds), so every tracked hold's deadline is capped there and the hold is reported lost if the
connection is not back by then; when the session is LOST its ephemeral nodes are gone, so every
hold is reported lost at once. A renewal after reconnecting in time restores the deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from ...errors import BackendError, BackendUnavailable, ConfigError
from ...sansio import run

if TYPE_CHECKING:
    from ...hold import Hold
    from ...url import LockURL

__all__ = ["Request", "Session", "Steps", "client_kwargs", "ensemble"]

log = logging.getLogger("lockkit.zookeeper")

T = TypeVar("T")

_ACLS = ("open", "creator", "read")


@dataclass(frozen=True)
class Request:
    """Requests to send at once: each ``start(client)`` returns kazoo's async result. With
    ``many``, the step's outcome is :meth:`Session.call_all`'s list, else the one answer."""

    what: str
    starts: tuple[Callable[[Any], Any], ...]
    many: bool = False


#: the lock operations on ZooKeeper, written once as plans of :class:`Request` steps (see
#: :mod:`lockkit_core.sansio`): :meth:`Session.run` sends them blocking, ``.aio`` on a loop
Steps = Generator[Request, Any, T]


def ensemble(url: LockURL) -> tuple[str, str]:
    """The URL's ``host:port,...`` servers and its chroot (``""`` for none), checked."""
    netloc = urlsplit(url.raw).netloc.rpartition("@")[2]
    if not netloc:
        raise ConfigError(
            f"the ZooKeeper URL {url.redacted()!r} names no server; "
            "use zookeeper://host1:2181,host2:2181/chroot"
        )
    for part in netloc.split(","):
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"bad server {part!r} in the ZooKeeper URL {url.redacted()!r}: "
                "each must be host:port, e.g. zookeeper://10.0.0.1:2181,10.0.0.2:2181/"
            )
    chroot = url.path.rstrip("/")
    if chroot and not chroot.startswith("/"):
        raise ConfigError(f"the ZooKeeper chroot must start with '/', got {chroot!r}")
    return netloc, chroot


def client_kwargs(
    hosts: str, username: str | None, password: str | None, options: Mapping[str, Any]
) -> dict[str, Any]:
    """KazooClient's keyword arguments for the URL's hosts, credentials and options."""
    from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

    kwargs: dict[str, Any] = {
        "hosts": hosts,
        "timeout": options.get("session_timeout", 10.0),
        "connection_retry": {"max_tries": -1, "delay": 0.05, "max_delay": 1.0},
        "command_retry": None,
    }
    scheme = options.get("auth", "digest" if username else None)
    username = options.get("username", username)
    password = options.get("password", password)
    if scheme not in (None, "digest", "sasl"):
        raise ConfigError(f"option 'auth' must be 'digest' or 'sasl', got {scheme!r}")
    if scheme is not None and (not username or password is None):
        raise ConfigError(
            f"option auth={scheme!r} needs a username and password: "
            "zookeeper://USER:PASSWORD@host:2181/ or the username/password options"
        )
    if scheme == "digest":
        kwargs["auth_data"] = [("digest", f"{username}:{password}")]
    elif scheme == "sasl":
        kwargs["sasl_options"] = {
            "mechanism": options.get("sasl_mechanism", "DIGEST-MD5"),
            "username": username,
            "password": password,
        }
    acl = options.get("acl", "creator" if scheme else "open")
    if acl not in _ACLS:
        raise ConfigError(f"option 'acl' must be one of {', '.join(_ACLS)}, got {acl!r}")
    if acl != "open" and scheme is None:
        raise ConfigError(f"option acl={acl!r} needs credentials (auth=digest or auth=sasl)")
    kwargs["default_acl"] = {
        "open": OPEN_ACL_UNSAFE,
        "creator": CREATOR_ALL_ACL,
        "read": CREATOR_ALL_ACL + READ_ACL_UNSAFE,
    }[acl]
    tls = {name: options[name] for name in ("certfile", "keyfile", "ca") if name in options}
    if options.get("use_ssl", bool(tls)):
        kwargs.update(use_ssl=True, verify_certs=options.get("verify_certs", True), **tls)
    elif tls:
        raise ConfigError("TLS files were given but use_ssl is false; drop them or set use_ssl")
    return kwargs


class Session:
    """One kazoo client, started lazily; see the module docstring."""

    def __init__(self, kwargs: Mapping[str, Any], socket_timeout: float, describe: str) -> None:
        self._kwargs = dict(kwargs)
        self.socket_timeout = socket_timeout
        self._describe = describe
        self._lock = threading.Lock()
        self._client: Any = None
        self._closed = False
        self._holds: list[Hold] = []
        self._pruned_at = 64
        self._suspended_at: float | None = None
        #: called on a thread of its own whenever the connection is (re)established
        self.on_reconnect: Callable[[], None] = lambda: None
        self.generation = 0  #: bumped whenever a session ends: cached node names die with it

    # -- the client -------------------------------------------------------------------------

    def needs_start(self) -> bool:
        """True before the first request: :meth:`client` would connect (blocking)."""
        return self._client is None and not self._closed

    def client(self) -> Any:
        """The started client; ``BackendUnavailable`` if it is closed or cannot connect now."""
        client = self._client
        if client is not None and client.connected:
            return client
        with self._lock:
            if self._closed:
                raise BackendUnavailable(f"the ZooKeeper client of {self._describe} is closed")
            if self._client is None:
                from kazoo.client import KazooClient

                made = KazooClient(**self._kwargs)
                made.add_listener(self._state_changed)
                try:
                    made.start(timeout=self.socket_timeout)
                except Exception as exc:
                    made.stop()
                    made.close()
                    raise BackendUnavailable(
                        f"cannot reach ZooKeeper at {self._describe} within "
                        f"{self.socket_timeout:g} s: {exc}"
                    ) from exc
                self._client = made
            if not self._client.connected:
                raise BackendUnavailable(
                    f"the connection to ZooKeeper at {self._describe} is down; reconnecting"
                )
            return self._client

    def call(self, what: str, start: Callable[[Any], Any]) -> Any:
        """Run one request (``start(client)`` returns kazoo's async result) within the socket
        timeout; translate kazoo's errors at this one boundary."""
        client = self.client()
        try:
            return start(client).get(timeout=self.socket_timeout)
        except Exception as exc:
            error = self.translate(what, exc)
            if error is exc:
                raise
            raise error from exc

    def call_all(self, what: str, *starts: Callable[[Any], Any]) -> list[Any]:
        """Send several requests at once and wait for all of them (one round trip): each
        answer in order, or kazoo's exception for an answer that is not a failure (see
        :meth:`translate`); a failure is raised."""
        client = self.client()
        pending = [start(client) for start in starts]
        answers: list[Any] = []
        for result in pending:
            try:
                answers.append(result.get(timeout=self.socket_timeout))
            except Exception as exc:
                error = self.translate(what, exc)
                if error is not exc:
                    raise error from exc
                answers.append(exc)
        return answers

    def perform(self, request: Request) -> Any:
        """Send ``request`` and wait for its answer (the blocking way)."""
        if request.many:
            return self.call_all(request.what, *request.starts)
        return self.call(request.what, request.starts[0])

    def run(self, steps: Steps[T]) -> T:
        """Run a plan of requests, blocking."""
        return run(steps, self.perform)

    def translate(self, what: str, exc: Exception) -> Exception:
        """Our error for kazoo's ``exc``; answers that are not failures (no such node, node
        exists, bad version, not empty) come back as they are, for the caller to decide."""
        from kazoo import exceptions as kex
        from kazoo.handlers.threading import KazooTimeoutError

        if isinstance(exc, KazooTimeoutError):
            return BackendUnavailable(
                f"ZooKeeper at {self._describe} did not answer within "
                f"{self.socket_timeout:g} s to {what}"
            )
        if isinstance(
            exc, (kex.ConnectionLoss, kex.SessionExpiredError, kex.ConnectionClosedError)
        ):
            return BackendUnavailable(
                f"lost the connection to ZooKeeper at {self._describe} to {what}: "
                f"{type(exc).__name__}"
            )
        if isinstance(exc, (kex.AuthFailedError, kex.NoAuthError)):
            return BackendUnavailable(
                f"ZooKeeper at {self._describe} refused our credentials to {what} "
                f"({type(exc).__name__}); check the URL's user and password and the ACLs"
            )
        answers = (kex.NoNodeError, kex.NodeExistsError, kex.BadVersionError, kex.NotEmptyError)
        if not isinstance(exc, answers) and isinstance(exc, kex.KazooException):
            return BackendError(
                f"ZooKeeper at {self._describe} failed to {what}: {type(exc).__name__} {exc}"
            )
        return exc

    # -- holders ----------------------------------------------------------------------------

    def track(self, hold: Hold) -> None:
        """Tell ``hold`` when the session that holds its node is in doubt or gone."""
        with self._lock:
            self._holds.append(hold)
            if len(self._holds) > self._pruned_at:
                self._holds = [h for h in self._holds if h.active]
                self._pruned_at = max(64, 2 * len(self._holds))

    def _active_holds(self) -> list[Hold]:
        with self._lock:
            self._holds = [h for h in self._holds if h.active]
            return list(self._holds)

    def _state_changed(self, state: str) -> None:
        # Runs on kazoo's connection thread: never block it.
        from kazoo.protocol.states import KazooState

        if state == KazooState.SUSPENDED:
            self._suspended_at = time.monotonic()
            client = self._client
            negotiated = getattr(client, "_session_timeout", None) or 0
            session = max(negotiated / 1000.0, 0.0) or float(self._kwargs["timeout"])
            cap = self._suspended_at + session / 3.0
            for hold in self._active_holds():
                hold.deadline = min(hold.deadline, cap)
            timer = threading.Timer(
                max(0.0, cap - time.monotonic()),
                self._suspended_too_long,
                args=(self._suspended_at,),
            )
            timer.daemon = True
            timer.start()
        elif state == KazooState.LOST:
            self._suspended_at = None
            self.generation += 1
            self._spawn(self._session_lost)
        else:  # CONNECTED
            self._suspended_at = None
            self._spawn(self.on_reconnect)

    def _suspended_too_long(self, since: float) -> None:
        if self._suspended_at == since:
            for hold in self._active_holds():
                hold.mark_lost(
                    "the connection to ZooKeeper was down past a third of the "
                    "session timeout; the session may have expired"
                )

    def _session_lost(self) -> None:
        why = (
            "its kit was closed, which ends the ZooKeeper session and frees its lock nodes"
            if self._closed
            else "the ZooKeeper session expired, and its lock nodes with it"
        )
        for hold in self._active_holds():
            hold.mark_lost(why)

    @staticmethod
    def _spawn(func: Callable[[], None]) -> None:
        def run() -> None:
            try:
                func()
            except Exception:
                log.exception("lockkit zookeeper session handler failed")

        threading.Thread(target=run, name="lockkit-zookeeper-session", daemon=True).start()

    # -- lifecycle --------------------------------------------------------------------------

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's client and its session are not ours to use or
        close (closing would end the parent's session), so start afresh."""
        self._lock = threading.Lock()
        self._client = None
        self._holds = []
        self.generation += 1

    def close(self) -> None:
        """Stop the client: our session ends, and with it every node it holds."""
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            try:
                client.stop()
                client.close()
            except Exception:  # closing must not fail the caller
                log.debug("closing the ZooKeeper client failed", exc_info=True)
