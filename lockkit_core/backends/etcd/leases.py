"""``Leases``: granting, renewing and revoking etcd leases, tracked on the monotonic clock."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time

from ...errors import BackendError, BackendUnavailable
from .client import Call, GatewayClient, LeaseNotFound, Steps
from .layout import LeaseRef

__all__ = ["ABANDONED_MAX", "LEASE_MARGIN", "RETRY", "Leases"]

log = logging.getLogger("lockkit.etcd")

#: a lease must outlast the ttl it backs by this much when it is put under a record
LEASE_MARGIN = 0.5
#: leases given up in an outage that are remembered for revoking
ABANDONED_MAX = 100
#: how often a thread tries again to revoke them while the store is out of reach
RETRY = 1.0


class Leases:
    """Lease operations through one client. A lease's end is counted from before the request
    that granted or renewed it, so it is never later than the server's."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client
        #: leases we gave up while the store could not be reached, revoked when it answers
        #: again: a request sent under one before the outage may still arrive (TCP delivers
        #: it when the link heals) and take a key for a caller that is gone
        self._abandoned: list[int] = []
        self._lock = threading.Lock()
        self._revoker: threading.Thread | None = None
        self._closed = threading.Event()

    def grant(self, ttl: float) -> Steps[LeaseRef]:
        """A new lease that outlasts ``ttl`` by at least ``LEASE_MARGIN`` when it is used
        (etcd counts whole seconds, and raises short ones to its minimum, about 2 s)."""
        sent = time.monotonic()
        answer = yield Call("lease/grant", {"TTL": math.ceil(ttl) + 2}, "grant a lease")
        granted = int(answer["TTL"])
        return LeaseRef(int(answer["ID"]), granted, sent + granted)

    def keep_alive(self, lease: LeaseRef) -> Steps[bool]:
        """Renew ``lease`` to its granted TTL; False if it is gone."""
        sent = time.monotonic()
        answer = yield Call("lease/keepalive", {"ID": lease.id}, "keep a lease alive")
        ttl = int(answer.get("result", {}).get("TTL", 0))
        if ttl <= 0:
            return False
        lease.ttl, lease.until = ttl, sent + ttl
        return True

    def fit(self, lease: LeaseRef, ttl: float) -> Steps[bool]:
        """Make sure ``lease`` outlasts ``ttl`` from now; False if it is gone."""
        if lease.left() >= ttl + LEASE_MARGIN:
            return True
        return (yield from self.keep_alive(lease)) and lease.left() >= ttl + LEASE_MARGIN

    def revoke(self, lease_id: int, *, reachable: bool = True) -> Steps[None]:
        """Revoke a lease we no longer need (its keys go with it). When the store has just
        failed we make no round trip: the lease is revoked by :meth:`revoke_abandoned`."""
        if not lease_id:
            return
        if not reachable:
            with self._lock:
                self._abandoned = [*self._abandoned[-ABANDONED_MAX + 1 :], lease_id]
                if self._revoker is None and not self._closed.is_set():
                    self._revoker = threading.Thread(
                        target=self._revoke_in_background, name="lockkit-etcd-revoker", daemon=True
                    )
                    self._revoker.start()
            return
        with contextlib.suppress(LeaseNotFound):  # expired or revoked already
            yield Call("lease/revoke", {"ID": lease_id}, "revoke a lease")

    def revoke_abandoned(self) -> Steps[None]:
        """Revoke the leases given up in an outage; those it cannot reach stay for the next
        try. A thread does so every :data:`RETRY` seconds until none is left, so a kit that
        makes no other call frees them too; operations call it first as well."""
        while True:
            with self._lock:
                if not self._abandoned:
                    return
                lease_id = self._abandoned[0]
            yield from self.revoke(lease_id)  # raises while the store is still out of reach
            with self._lock, contextlib.suppress(ValueError):
                self._abandoned.remove(lease_id)

    def _revoke_in_background(self) -> None:
        while not self._closed.is_set():
            try:
                self.client.run(self.revoke_abandoned())
            except BackendUnavailable:
                pass  # still out of reach: try again in a while
            except BackendError as exc:  # the lease then ends by itself
                log.warning("could not revoke a lease given up in an outage: %s", exc)
                with self._lock:
                    self._abandoned = self._abandoned[1:]
            with self._lock:
                if not self._abandoned:
                    self._revoker = None
                    return
            self._closed.wait(RETRY)
        with self._lock:
            self._revoker = None

    def close(self) -> None:
        """Stop trying; leases not revoked yet end by themselves."""
        self._closed.set()
