"""What the etcd backend stores: key names, the lock record, and the transactions' parts."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from .client import b64, unb64

__all__ = [
    "LOCKS",
    "Held",
    "LeaseRef",
    "Record",
    "lock_key",
    "prefix_end",
    "queue_entry",
    "queue_prefix",
]

#: lock records: ``lockkit/l/<namespaced key>``
LOCKS = "lockkit/l/"
#: waiters: ``lockkit/q/<sha1 of the namespaced key>/<owner id>``
QUEUES = "lockkit/q/"


def lock_key(key: str) -> str:
    """The stored key of the lock on ``key`` (already namespaced)."""
    return LOCKS + key


def queue_prefix(key: str) -> str:
    """The prefix of ``key``'s wait queue: a digest, so no key's queue holds another's."""
    digest = hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()  # noqa: S324
    return f"{QUEUES}{digest}/"


def queue_entry(key: str, owner_id: str) -> str:
    """The queue entry of one waiter."""
    return queue_prefix(key) + owner_id


def prefix_end(prefix: str) -> str:
    """The ``range_end`` that makes a range cover every key starting with ``prefix``."""
    raw = bytearray(prefix.encode("utf-8", "surrogatepass"))
    while raw and raw[-1] == 0xFF:
        raw.pop()
    if not raw:
        return "\0"
    raw[-1] += 1
    return raw.decode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class Record:
    """The lock record's value (``owner`` is the owner *id*) and its revisions and lease."""

    owner: str
    ttl: float
    holder: str | None
    create_revision: int
    mod_revision: int
    lease: int
    #: when the holder got it (epoch s, the holder's clock: etcd's KV keeps no time)
    started: float | None = None
    #: the fencing token of a record handed over in place (see :attr:`fence`)
    token: int | None = None

    @property
    def fence(self) -> int:
        """The holder's fencing token: the create revision, or for a record handed over in
        place from one holder of this process to the next (a put keeps the create revision)
        the token its value carries: the last holder's plus one, never more than the
        revision of the hand-over, so any record created later gets a higher one."""
        return self.create_revision if self.token is None else self.token

    @staticmethod
    def value(
        owner_id: str, ttl: float, holder: str, started: float | None, token: int | None = None
    ) -> str:
        """The stored value, base64-encoded for a request."""
        doc: dict[str, Any] = {"owner": owner_id, "ttl": ttl, "holder": holder}
        if started is not None:
            doc["started"] = round(started, 3)
        if token is not None:
            doc["token"] = token
        return b64(json.dumps(doc))

    @classmethod
    def parse(cls, kv: dict[str, Any]) -> Record:
        """From a ``kvs`` entry of a range answer; foreign values read as unknown owners."""
        try:
            data = json.loads(unb64(kv.get("value", "")))
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        ttl = data.get("ttl")
        started = data.get("started")
        token = data.get("token")
        return cls(
            owner=str(data.get("owner", "")),
            ttl=float(ttl) if isinstance(ttl, int | float) and ttl > 0 else 30.0,
            holder=str(data["holder"]) if "holder" in data else None,
            create_revision=int(kv.get("create_revision", 0)),
            mod_revision=int(kv.get("mod_revision", 0)),
            lease=int(kv.get("lease", 0)),
            started=float(started) if isinstance(started, int | float) and started > 0 else None,
            token=token if isinstance(token, int) and token > 0 else None,
        )


@dataclass
class LeaseRef:
    """A lease we granted: its id, granted TTL and when (monotonic) it may end at the soonest."""

    id: int
    ttl: int
    until: float

    def left(self, now: float | None = None) -> float:
        return self.until - (time.monotonic() if now is None else now)


@dataclass
class Held:
    """What this backend knows of a lock it holds: its lease, and the ttl in the record."""

    lease: LeaseRef
    ttl: float
    started: float | None = None  #: kept in the record by every renewal
    #: the token the record's value carries (None: its create revision is the token)
    token: int | None = None
    #: the record's mod revision after our last write (0: unknown); a renewal compares it,
    #: since after a hand-over in place the next holder's record is under the same lease
    mod: int = 0
    #: the fencing token, once known
    fence: int | None = None
