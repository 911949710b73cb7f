"""The admin reads of etcd://: a lock record as a ``Lease``, and the list of held locks."""

from __future__ import annotations

from ...errors import BackendError, BackendUnavailable
from ..base import Lease
from .client import GatewayClient, b64, unb64
from .layout import LOCKS, Record, lock_key, prefix_end

__all__ = ["lease_left", "lease_of", "list_leases"]


def lease_left(client: GatewayClient, lease_id: int) -> float | None:
    """Seconds left on the etcd lease ``lease_id``; None if it is gone or cannot be read."""
    try:
        answer = client.call("lease/timetolive", {"ID": lease_id}, "read a lease's time to live")
    except BackendError as exc:
        if isinstance(exc, BackendUnavailable):
            raise
        return None
    ttl = int(answer.get("TTL", -1))
    return float(ttl) if ttl >= 0 else None


def lease_of(client: GatewayClient, stored: str, record: Record) -> Lease:
    """What admin shows of the lock ``record`` on the stored key ``stored``."""
    left = lease_left(client, record.lease) if record.lease else None
    return Lease(
        key=stored,
        owner_hint=record.owner[:8],
        token=record.fence,
        ttl_remaining=record.ttl if left is None else min(left, record.ttl),
        holder=record.holder,
        started=record.started,
    )


def list_leases(client: GatewayClient, prefix: str) -> list[Lease]:
    """The held locks whose stored key starts with ``prefix``, sorted by key."""
    start = lock_key(prefix)
    answer = client.call(
        "kv/range",
        {"key": b64(start), "range_end": b64(prefix_end(start)), "sort_target": "KEY"},
        "list locks",
    )
    leases = []
    for kv in answer.get("kvs") or []:
        stored = unb64(kv["key"])[len(LOCKS) :]
        leases.append(lease_of(client, stored, Record.parse(kv)))
    return sorted(leases, key=lambda lease: lease.key)
