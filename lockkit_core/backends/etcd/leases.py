"""``Leases``: granting, renewing and revoking etcd leases, tracked on the monotonic clock."""

from __future__ import annotations

import contextlib
import math
import time

from .client import GatewayClient, LeaseNotFound
from .layout import LeaseRef

__all__ = ["LEASE_MARGIN", "Leases"]

#: a lease must outlast the ttl it backs by this much when it is put under a record
LEASE_MARGIN = 0.5


class Leases:
    """Lease operations through one client. A lease's end is counted from before the request
    that granted or renewed it, so it is never later than the server's."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client

    def grant(self, ttl: float) -> LeaseRef:
        """A new lease that outlasts ``ttl`` by at least ``LEASE_MARGIN`` when it is used
        (etcd counts whole seconds, and raises short ones to its minimum, about 2 s)."""
        sent = time.monotonic()
        answer = self.client.call("lease/grant", {"TTL": math.ceil(ttl) + 2}, "grant a lease")
        granted = int(answer["TTL"])
        return LeaseRef(int(answer["ID"]), granted, sent + granted)

    def keep_alive(self, lease: LeaseRef) -> bool:
        """Renew ``lease`` to its granted TTL; False if it is gone."""
        sent = time.monotonic()
        answer = self.client.call("lease/keepalive", {"ID": lease.id}, "keep a lease alive")
        ttl = int(answer.get("result", {}).get("TTL", 0))
        if ttl <= 0:
            return False
        lease.ttl, lease.until = ttl, sent + ttl
        return True

    def fit(self, lease: LeaseRef, ttl: float) -> bool:
        """Make sure ``lease`` outlasts ``ttl`` from now; False if it is gone."""
        if lease.left() >= ttl + LEASE_MARGIN:
            return True
        return self.keep_alive(lease) and lease.left() >= ttl + LEASE_MARGIN

    def revoke(self, lease_id: int, *, reachable: bool = True) -> None:
        """Revoke a lease we no longer need (its keys go with it). When the store has just
        failed we make no round trip: the lease then ends by its TTL."""
        if not reachable or not lease_id:
            return
        with contextlib.suppress(LeaseNotFound):  # expired or revoked already
            self.client.call("lease/revoke", {"ID": lease_id}, "revoke a lease")
