"""``GatewayClient``: a small typed client for etcd's v3 JSON gateway (``POST /v3/...``) on
``http.client``, with failover between members and one time budget per request.

Why not a driver: the ``etcd3`` package is tied to old grpc/protobuf and unmaintained, and a
general client's retries and pools would stretch a caller's timeout. Here every request has a
budget of one socket timeout across all members: a refused connection moves on to the next
member at once, a member that says it has no leader is left for the next one, and a member
that does not answer within the budget is a :class:`BackendUnavailable` (the next request
starts at the next member). Keys and values travel base64-encoded, int64 fields as strings.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Generator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from ...errors import BackendError, BackendUnavailable
from ...sansio import run

__all__ = [
    "Call",
    "Endpoint",
    "GatewayClient",
    "Join",
    "LeaseNotFound",
    "Refused",
    "Steps",
    "TokenExpired",
    "b64",
    "unb64",
]

T = TypeVar("T")

Endpoint = tuple[str, int]

#: gRPC status codes the gateway returns in ``{"code": ...}``
_UNAVAILABLE = 14
_UNAUTHENTICATED = 16
_PERMISSION_DENIED = 7
_INVALID_AUTH_TOKEN = "invalid auth token"  # noqa: S105 - an error text, not a secret


class LeaseNotFound(BackendError):
    """The lease named in a request no longer exists on the store (expired or revoked)."""


@dataclass(frozen=True)
class Call:
    """One gateway request, as a step of a plan: ``POST /v3/<path>`` with ``body``; the
    step's outcome is the decoded answer (:meth:`GatewayClient.call`)."""

    path: str
    body: Mapping[str, Any]
    what: str


@dataclass(frozen=True)
class Join:
    """A step: wait for another caller's request on its way (``future``, set from whichever
    thread or loop made it); its outcome is the future's result."""

    future: Future[Any]


#: the etcd operations, written once as plans of :class:`Call` steps (and the waiter's watch
#: steps; see :mod:`lockkit_core.sansio`): :meth:`GatewayClient.run` makes them blocking,
#: :mod:`.aio` on an event loop
Steps = Generator[Any, Any, T]


def b64(text: str | bytes) -> str:
    """A key or value as the gateway wants it."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return base64.b64encode(raw).decode("ascii")


def unb64(text: str) -> str:
    """A key or value from the gateway, as text."""
    return base64.b64decode(text).decode("utf-8", "surrogatepass")


class GatewayClient:
    """Requests to one etcd cluster through any of its members."""

    def __init__(
        self,
        endpoints: list[Endpoint],
        *,
        timeout: float,
        connect_timeout: float,
        tls: ssl.SSLContext | None = None,
        username: str | None = None,
        password: str | None = None,
        describe: str = "etcd",
    ) -> None:
        self.endpoints = endpoints
        self.timeout = timeout
        self.connect_timeout = min(connect_timeout, timeout)
        self.tls = tls
        self.describe = describe
        self._credentials = (username, password or "") if username else None
        self._token: str | None = None
        self._lock = threading.Lock()
        self._idle: dict[Endpoint, list[http.client.HTTPConnection]] = {e: [] for e in endpoints}
        self._current = 0  #: the member tried first

    # -- connections -----------------------------------------------------------------------------

    def connect(self, endpoint: Endpoint, timeout: float) -> http.client.HTTPConnection:
        """A new connection to ``endpoint``, connected within ``timeout`` seconds."""
        host, port = endpoint
        conn: http.client.HTTPConnection
        if self.tls is not None:
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=self.tls)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.connect()
        if conn.sock is not None:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _take(self, endpoint: Endpoint, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            idle = self._idle[endpoint]
            if idle:
                return idle.pop(), True
        return self.connect(endpoint, timeout), False

    def _give(self, endpoint: Endpoint, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle[endpoint]) < 16:
                self._idle[endpoint].append(conn)
                return
        conn.close()

    def order(self) -> list[Endpoint]:
        """The members in the order a request tries them."""
        start = self._current
        return self.endpoints[start:] + self.endpoints[:start]

    def _skip(self, endpoint: Endpoint) -> None:
        with self._lock:
            if self.endpoints[self._current] == endpoint:
                self._current = (self._current + 1) % len(self.endpoints)

    def headers(self) -> dict[str, str]:
        """Headers for one request, with the auth token once there is one."""
        headers = {"Content-Type": "application/json"}
        if self._token is not None:
            headers["Authorization"] = self._token
        return headers

    # -- requests --------------------------------------------------------------------------------

    def run(self, steps: Steps[T]) -> T:
        """Run a plan of :class:`Call` steps, blocking."""
        return run(steps, self.perform)

    def perform(self, step: Any) -> Any:
        """One step of a plan, blocking: a :class:`Call`, or a waiter's watch step."""
        if isinstance(step, Call):
            return self.call(step.path, step.body, step.what)
        if isinstance(step, Join):
            return step.future.result()  # bounded by the other caller's own time budget
        from .watch import perform_watch_step  # the watch builds on this client

        return perform_watch_step(self, step)

    def call(self, path: str, body: Mapping[str, Any], what: str) -> dict[str, Any]:
        """``POST /v3/<path>`` and return the decoded answer; see the module docstring for
        how members are tried. ``what`` names the operation in errors."""
        deadline = time.monotonic() + self.timeout
        if self._credentials is not None and self._token is None:
            self._authenticate(deadline, what)
        try:
            return self._call(path, body, what, deadline)
        except TokenExpired:
            self._authenticate(deadline, what)
            return self._call(path, body, what, deadline)

    def _call(
        self, path: str, body: Mapping[str, Any], what: str, deadline: float
    ) -> dict[str, Any]:
        payload = json.dumps(body).encode()
        failures: list[str] = []
        for endpoint in self.order():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                answer = self._request(endpoint, path, payload, remaining)
            except Refused as exc:
                failures.append(f"{endpoint[0]}:{endpoint[1]}: {exc}")
                self._skip(endpoint)
                continue
            except (TimeoutError, OSError, http.client.HTTPException) as exc:
                raise self.silent(endpoint, what, exc) from exc
            decoded = self.answer(endpoint, what, *answer, failures)
            if decoded is not None:
                return decoded
        raise self.unreachable(what, failures)

    def silent(self, endpoint: Endpoint, what: str, exc: BaseException) -> BackendUnavailable:
        """The error for a member that took the request but did not answer in time; the
        next request starts at the next member."""
        self._skip(endpoint)
        return BackendUnavailable(
            f"etcd at {self.describe} ({endpoint[0]}:{endpoint[1]}) did not answer "
            f"within {self.timeout:g} s to {what}: {exc!r}"
        )

    def unreachable(self, what: str, failures: list[str]) -> BackendUnavailable:
        """The error once no member took the request within the time budget."""
        return BackendUnavailable(
            f"cannot reach etcd at {self.describe} to {what} within {self.timeout:g} s: "
            + ("; ".join(failures) or "no time left")
        )

    def answer(
        self, endpoint: Endpoint, what: str, status: int, data: bytes, failures: list[str]
    ) -> dict[str, Any] | None:
        """Read a member's answer: the decoded body, None to ask the next member (noted in
        ``failures``), or the error to raise (see the module docstring)."""
        if status == 200:
            decoded: dict[str, Any] = json.loads(data)
            return decoded
        error = _decode_error(data)
        message = str(error.get("message") or error.get("error") or data[:200])
        code = error.get("code")
        if code == _UNAVAILABLE:
            failures.append(f"{endpoint[0]}:{endpoint[1]}: {message}")
            self._skip(endpoint)
            return None
        if _INVALID_AUTH_TOKEN in message and self._credentials is not None:
            raise TokenExpired(message)
        if code in (_UNAUTHENTICATED, _PERMISSION_DENIED) or any(
            words in message for words in ("auth", "user name is empty", "permission")
        ):
            raise BackendUnavailable(
                f"etcd at {self.describe} refused our credentials to {what}: {message}; "
                "give a user allowed to use the lockkit/ keys and leases as "
                "etcd://USER:PASSWORD@host:2379"
            )
        if "lease not found" in message:
            raise LeaseNotFound(f"etcd at {self.describe} failed to {what}: {message}")
        raise BackendError(f"etcd at {self.describe} failed to {what}: {message}")

    @property
    def credentials(self) -> tuple[str, str] | None:
        """The user and password to log in with, if any."""
        return self._credentials

    def logged_in(self, answer: dict[str, Any] | None) -> None:
        """Keep the token of an ``auth/authenticate`` answer (None: forget the old one)."""
        self._token = None if answer is None else str(answer["token"])

    @property
    def needs_login(self) -> bool:
        """True when requests need a token we do not have yet."""
        return self._credentials is not None and self._token is None

    def _request(
        self, endpoint: Endpoint, path: str, payload: bytes, timeout: float
    ) -> tuple[int, bytes]:
        """One request to one member. ``Refused`` when the request never reached it (so
        another member may be asked); other errors when it may have."""
        for attempt in (0, 1):
            try:
                conn, reused = self._take(endpoint, min(timeout, self.connect_timeout))
            except (ConnectionError, TimeoutError, OSError) as exc:
                raise Refused(repr(exc)) from exc
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                conn.request("POST", "/v3/" + path, payload, self.headers())
                response = conn.getresponse()
                data = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                if reused and attempt == 0:
                    continue  # a pooled connection the member had closed: ask once more
                raise
            except BaseException:
                conn.close()
                raise
            if response.will_close:
                conn.close()
            else:
                self._give(endpoint, conn)
            return response.status, data
        raise AssertionError("unreachable")

    def _authenticate(self, deadline: float, what: str) -> None:
        assert self._credentials is not None
        name, password = self._credentials
        self._token = None
        payload = {"name": name, "password": password}
        answer = self._call("auth/authenticate", payload, f"log in as {name!r} to {what}", deadline)
        self._token = str(answer["token"])

    def close(self) -> None:
        """Close every pooled connection."""
        with self._lock:
            conns = [c for idle in self._idle.values() for c in idle]
            for idle in self._idle.values():
                idle.clear()
        for conn in conns:
            conn.close()


class Refused(Exception):
    """The request did not reach the member: try the next one."""


class TokenExpired(Exception):
    """The auth token expired: log in again and repeat the request once."""


def _decode_error(data: bytes) -> dict[str, Any]:
    try:
        decoded = json.loads(data)
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}
