"""``Watch``: one streaming ``POST /v3/watch`` on a connection of its own.

The gateway answers a watch with a never-ending chunked response of JSON lines: first
``{"result": {"created": true}}`` (read before the constructor returns; its revision is
:attr:`Watch.revision`), then one line per batch of events. Watches start at the current
revision: etcd serves a watch that starts in the past from a loop that runs every 100 ms,
which would add up to 100 ms to every hand-over. Every read is bounded
by a socket timeout, so a member that dies or a link that goes dark never stalls a waiter
longer than the wait it asked for; a broken or cancelled stream just ends the wait early
(the caller then asks the store again).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

from .client import GatewayClient, b64

__all__ = [
    "READ_ON",
    "NextEvents",
    "OpenWatch",
    "Pause",
    "Watch",
    "interpret",
    "perform_watch_step",
    "settle",
]


@dataclass(frozen=True)
class OpenWatch:
    """A waiter's step: open a watch on ``key`` within ``timeout``; its outcome is the watch
    (:class:`Watch`, or its asyncio twin in ``.aio``), ``broken`` if no member took it."""

    key: str
    timeout: float


@dataclass(frozen=True)
class NextEvents:
    """A waiter's step: ``watch.next_events(timeout)``."""

    watch: Any
    timeout: float


@dataclass(frozen=True)
class Pause:
    """A waiter's step: sleep ``seconds`` (the fallback when no watch could be opened)."""

    seconds: float


def perform_watch_step(client: GatewayClient, step: Any) -> Any:
    """One of the waiter's watch steps, blocking."""
    if isinstance(step, OpenWatch):
        return Watch(client, step.key, step.timeout)
    if isinstance(step, NextEvents):
        return step.watch.next_events(step.timeout)
    assert isinstance(step, Pause), step
    if step.seconds > 0:
        time.sleep(step.seconds)
    return None


def interpret(line: bytes) -> tuple[str, Any]:
    """What one line of a watch stream says: ``("created", revision)``, ``("events",
    [...])``, ``("end", None)`` (the stream is over: an error, a cancel, a compaction past our
    revision) or ``("nothing", None)`` (a line to skip)."""
    try:
        message = json.loads(line)
    except ValueError:
        return "nothing", None
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict):
        return "end", None  # an error line: the stream is over
    if result.get("created"):
        return "created", int(result.get("header", {}).get("revision", 0))
    if result.get("canceled") or result.get("compact_revision"):
        return "end", None  # compacted past our revision: look again
    events = result.get("events")
    return ("events", list(events)) if events else ("nothing", None)


#: what :func:`settle` returns for a line that ends nothing: read the next one
READ_ON: Any = object()


class _Stream(Protocol):
    revision: int

    def close(self) -> None: ...


def settle(watch: _Stream, line: bytes) -> list[dict[str, Any]] | None:
    """What one line read from ``watch`` (``b""``: the stream ended or broke) means for its
    ``next_events``, blocking or awaited alike: events, ``[]`` (the watch is created), None
    (it is over, and closed), or :data:`READ_ON`."""
    if not line:
        watch.close()
        return None
    kind, value = interpret(line)
    if kind == "end":
        watch.close()
        return None
    if kind == "created":
        watch.revision = value
        return []
    if kind == "events":
        return value  # type: ignore[no-any-return]
    return READ_ON  # type: ignore[no-any-return]


class Watch:
    """Events on ``[key, range_end)`` from ``start_revision`` on, read with timeouts."""

    def __init__(self, client: GatewayClient, key: str, timeout: float) -> None:
        self._conn: http.client.HTTPConnection | None = None
        self._response: http.client.HTTPResponse | None = None
        self.broken = False
        #: the revision the watch starts after, once it is created
        self.revision = 0
        request: dict[str, Any] = {"key": b64(key)}
        deadline = time.monotonic() + timeout
        for endpoint in client.order():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                conn = client.connect(endpoint, min(remaining, client.connect_timeout))
                conn.request(
                    "POST",
                    "/v3/watch",
                    json.dumps({"create_request": request}),
                    client.headers(),
                )
                response = conn.getresponse()
            except (OSError, http.client.HTTPException):
                continue
            if response.status != 200:
                conn.close()
                continue
            self._conn, self._response = conn, response
            if self.next_events(deadline - time.monotonic()) is not None and self.revision:
                return
            self.close()
            return
        self.broken = True

    def next_events(self, timeout: float) -> list[dict[str, Any]] | None:
        """The next batch of events within ``timeout`` seconds; ``[]`` when the time ran out
        quietly, ``None`` when the stream ended or broke (the key may have changed)."""
        deadline = time.monotonic() + timeout
        while not self.broken:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            assert self._conn is not None and self._response is not None
            try:
                if self._conn.sock is not None:
                    self._conn.sock.settimeout(remaining)
                line = self._response.readline()
            except TimeoutError:
                return []
            except (OSError, http.client.HTTPException, ValueError):
                line = b""
            found = settle(self, line)
            if found is not READ_ON:
                return found
        return None

    def close(self) -> None:
        """Drop the stream (the member cancels the watch when the connection goes)."""
        self.broken = True
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = self._response = None
