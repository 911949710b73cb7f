"""Lock-node names, paths and data: pure functions, no I/O.

A key ``<full key>`` lives under ``<chroot>/lockkit/locks/k<quoted key>`` (percent-quoted so any
text makes one valid node name). Each contender is one ephemeral sequential child
``<owner id>-<10-digit sequence>``; the lowest sequence holds the lock.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import quote, unquote

__all__ = [
    "NodeData",
    "key_node",
    "node_key",
    "node_owner",
    "ordered",
    "remaining_ms",
]

_SEQ_DIGITS = 10


def key_node(key: str) -> str:
    """The node name of ``key`` under the locks root (one path segment, ASCII)."""
    return "k" + quote(key, safe="")


def node_key(name: str) -> str | None:
    """The key a node name under the locks root stands for; None for foreign nodes."""
    return unquote(name[1:]) if name.startswith("k") else None


def node_owner(child: str) -> str:
    """The owner id part of a contender's node name."""
    return child[: -_SEQ_DIGITS - 1] if len(child) > _SEQ_DIGITS else child


def ordered(children: list[str]) -> list[str]:
    """Contender nodes in queue order (by their sequence suffix); foreign names dropped."""
    mine = [c for c in children if len(c) > _SEQ_DIGITS and c[-_SEQ_DIGITS:].isdigit()]
    return sorted(mine, key=lambda c: c[-_SEQ_DIGITS:])


def remaining_ms(mtime_ms: int, lease_ms: int, server_now_ms: float) -> float | None:
    """What is left of a claimed lease stamped at ``mtime_ms`` (server clock); None for a
    node that has not claimed (a waiter, bound to its session only)."""
    if lease_ms <= 0:
        return None
    return mtime_ms + lease_ms - server_now_ms


#: this host's name, read once (a system call each time: on an event loop, one per attempt)
_HOST = socket.gethostname()


@dataclass(frozen=True)
class NodeData:
    """What a lock node carries: the lease (0 while queued) and who holds it, for admins;
    a queued node also the lease it will claim (``wants_ms``), so the node behind it knows
    how long a holder that stops renewing may block it."""

    lease_ms: int
    host: str
    pid: int
    thread: str
    #: when the node claimed the lock (or queued), seconds since the epoch by the server's
    #: clock as last seen (:meth:`LockTree.server_now`); kept by renewals, for display only
    since: float
    wants_ms: int = 0

    @classmethod
    def here(cls, lease_ms: int, wants_ms: int = 0, since: float | None = None) -> NodeData:
        """Data for a node made by the current thread of this process (``since``: the
        claim's time, default now)."""
        return cls(
            lease_ms,
            _HOST,
            os.getpid(),
            threading.current_thread().name,
            time.time() if since is None else since,
            wants_ms,
        )

    @property
    def term_ms(self) -> int:
        """The lease this node holds, or will claim when first."""
        return self.lease_ms or self.wants_ms

    def encode(self) -> bytes:
        doc: dict[str, object] = {
            "lease_ms": self.lease_ms,
            "host": self.host,
            "pid": self.pid,
            "thread": self.thread,
            "since": round(self.since, 3),
        }
        if self.wants_ms:
            doc["wants_ms"] = self.wants_ms
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> NodeData:
        """Parse node data; anything unreadable is a waiter of unknown origin (never expired
        by lease, only by its session)."""
        try:
            doc = json.loads(raw or b"{}")
            return cls(
                int(doc.get("lease_ms", 0)),
                str(doc.get("host", "?")),
                int(doc.get("pid", 0)),
                str(doc.get("thread", "?")),
                float(doc.get("since", 0.0)),
                int(doc.get("wants_ms", 0)),
            )
        except (ValueError, TypeError, AttributeError):
            return cls(0, "?", 0, "?", 0.0)

    def describe(self, waiting: int) -> str:
        """``host pid N thread T since <UTC time>[, K waiting]`` for the admin views."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))
        text = f"{self.host} pid {self.pid} thread {self.thread} since {stamp}"
        return text + (f", {waiting} waiting" if waiting else "")
