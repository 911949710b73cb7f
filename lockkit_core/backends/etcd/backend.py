"""``EtcdBackend``: leases, the create-if-absent transaction, take-overs and the admin reads."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from ...errors import BackendError, BackendUnavailable, ConfigError
from ...url import LockURL
from ..base import Backend, Capability, Grade, Grant, Lease, Waiter, owner_id
from .client import Endpoint, GatewayClient, LeaseNotFound, b64, unb64
from .layout import (
    LOCKS,
    Held,
    LeaseRef,
    Record,
    lock_key,
    prefix_end,
    queue_entry,
    queue_prefix,
)
from .waiter import QUEUE_TTL, WAIT_SLICE, EtcdWaiter

#: queue entries left in an outage that are remembered for deletion
STALE_MAX = 100
#: renew the queue lease when less than this is left of it
QUEUE_RENEW = 2.0

__all__ = ["EtcdBackend"]

log = logging.getLogger("lockkit.etcd")

DEFAULT_PORT = 2379
#: a lease must outlast the ttl it backs by this much when it is put under a record
LEASE_MARGIN = 0.5
#: revisions of busy records remembered for take-overs (oldest forgotten first)
SEEN_MAX = 4096


class EtcdBackend(Backend):
    """An etcd v3 cluster through its JSON gateway, failing over between members."""

    schemes: ClassVar[tuple[str, ...]] = ("etcd",)
    capabilities: ClassVar[Capability] = (
        Capability.TTL
        | Capability.FENCING
        | Capability.FAIR
        | Capability.NOTIFY
        | Capability.CROSS_PROCESS
        | Capability.CROSS_HOST
        | Capability.LIST
    )
    grade: ClassVar[Grade] = Grade.CONSENSUS
    option_types: ClassVar[Mapping[str, type]] = {
        "socket_timeout": float,
        "connect_timeout": float,
        "username": str,
        "password": str,
        "tls": bool,
        "ca_file": str,
        "cert_file": str,
        "key_file": str,
    }

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self._endpoints = parse_endpoints(url)
        timeout = float(self.options.get("socket_timeout", 5.0))
        connect = float(self.options.get("connect_timeout", min(timeout, 2.0)))
        if not (math.isfinite(timeout) and timeout > 0 and math.isfinite(connect) and connect > 0):
            raise ConfigError(
                f"socket_timeout and connect_timeout must be positive seconds for "
                f"{url.redacted()}, got {timeout!r} and {connect!r}"
            )
        self._timeout, self._connect_timeout = timeout, connect
        self._tls = self._tls_context()
        username = self.options.get("username", url.username)
        password = self.options.get("password", url.password)
        if password is not None and not username:
            raise ConfigError(
                f"a password without a username for {url.redacted()}: etcd logs in as a user; "
                "add it as etcd://USER:PASSWORD@host:2379 or ?username=USER"
            )
        self._username, self._password = username, password
        self.client = self._new_client()
        self._holder = f"{socket.gethostname()} pid "
        self._held: dict[tuple[str, str], Held] = {}
        self._seen: dict[str, tuple[int, float]] = {}
        self._waiters: dict[tuple[str, str], EtcdWaiter] = {}
        self._later: list[int] = []  #: leases to revoke with the next release
        self._later_lock = threading.Lock()
        self._queue_lease: LeaseRef | None = None
        self._queue_lock = threading.Lock()
        self._queue_grant_lock = threading.Lock()
        #: queue entries of waiters that left during an outage, deleted by the next attempt
        self._stale_entries: list[str] = []

    def _tls_context(self) -> ssl.SSLContext | None:
        files = [self.options.get(name) for name in ("ca_file", "cert_file", "key_file")]
        if not self.options.get("tls", any(files)):
            return None
        ca_file, cert_file, key_file = files
        try:
            context = ssl.create_default_context(cafile=ca_file)
            if cert_file is not None:
                context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot load the TLS files for {self.url.redacted()}: {exc}"
            ) from exc
        return context

    def _new_client(self) -> GatewayClient:
        return GatewayClient(
            self._endpoints,
            timeout=self._timeout,
            connect_timeout=self._connect_timeout,
            tls=self._tls,
            username=self._username,
            password=self._password,
            describe=self.describe(),
        )

    # -- leases ----------------------------------------------------------------------------------

    def grant(self, ttl: float) -> LeaseRef:
        """A new lease that outlasts ``ttl`` by at least ``LEASE_MARGIN`` when it is used."""
        sent = time.monotonic()
        want = math.ceil(ttl) + 2
        answer = self.client.call("lease/grant", {"TTL": want}, "grant a lease")
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

    # -- locking ---------------------------------------------------------------------------------

    def _value(self, owner: str, ttl: float) -> str:
        return Record.value(owner_id(owner), ttl, self._holder + str(os.getpid()))

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        waiter = self._waiters.get((key, owner))
        lease = waiter.lock_lease(ttl) if waiter is not None else self.grant(ttl)
        acquired = False
        try:
            for _ in range(2):  # once more after taking over from a holder that stopped
                if not self.fit(lease, ttl):
                    self.revoke(lease.id)
                    lease = self.grant(ttl)
                    if waiter is not None:
                        waiter.lease = lease
                grant, record = self._attempt(key, owner, ttl, lease, waiter)
                if grant is not None:
                    acquired = grant.acquired
                    return grant
                assert record is not None
                left = self._unchanged_for(key, record)
                if left > 0:
                    return Grant(False, retry_after=left)
                self._take_over(key, record)
            return Grant(False, retry_after=None)
        finally:
            if not acquired and waiter is None:
                self.revoke(lease.id)

    def _attempt(
        self, key: str, owner: str, ttl: float, lease: LeaseRef, waiter: EtcdWaiter | None
    ) -> tuple[Grant | None, Record | None]:
        """One create-if-absent transaction: a grant, or the busy record (None, record), or
        (``Grant(False)``, None) when the key is free but others queue before us."""
        lkey = lock_key(key)
        queue = queue_prefix(key)
        compare: list[dict[str, Any]] = [
            {"key": b64(lkey), "target": "VERSION", "result": "EQUAL", "version": 0}
        ]
        success: list[dict[str, Any]] = [
            {"request_put": {"key": b64(lkey), "value": self._value(owner, ttl),
                             "lease": lease.id}}
        ]
        failure: list[dict[str, Any]] = [{"request_range": {"key": b64(lkey)}}]
        span = {"key": b64(queue), "range_end": b64(prefix_end(queue))}
        mine = queue_entry(key, owner_id(owner))
        # A waiter joins the queue in its attempt once it has failed one, or at once when
        # this backend has a queue lease already (it waits often): a free key costs no
        # queue lease.
        joining = (
            waiter is not None
            and waiter.queued_at is None
            and (waiter.failed or self._queue_lease is not None)
        )
        if waiter is not None and waiter.queued_at is not None:
            # We are first if every queued entry was created no earlier than ours.
            compare.append({**span, "target": "CREATE", "result": "GREATER",
                            "create_revision": waiter.queued_at - 1})
            success.append({"request_delete_range": {"key": b64(mine)}})
            failure.append({"request_range": {"key": b64(mine)}})
            failure.append({"request_range": {
                **span, "max_create_revision": waiter.queued_at - 1, "sort_order": "DESCEND",
                "sort_target": "CREATE", "limit": 1, "keys_only": True}})
        else:
            # Queued waiters go first: take the key only when nobody queues.
            compare.append({**span, "target": "VERSION", "result": "EQUAL", "version": 0})
            if joining:
                queue_lease = self.queue_lease().id
                failure.append({"request_put": {"key": b64(mine), "value": "",
                                                "lease": queue_lease}})
                failure.append({"request_range": {"key": b64(mine), "keys_only": True}})
                failure.append({"request_range": {
                    **span, "sort_order": "DESCEND", "sort_target": "CREATE", "limit": 2,
                    "keys_only": True}})
        with self._queue_lock:
            stale, self._stale_entries = self._stale_entries, []
        for entry in stale:
            cleanup = {"request_delete_range": {"key": b64(entry)}}
            success.append(cleanup)
            failure.append(cleanup)
        sent = time.monotonic()
        body = {"compare": compare, "success": success, "failure": failure}
        try:
            answer = self.client.call("kv/txn", body, f"acquire {key!r}")
        except LeaseNotFound:
            if not joining:
                raise
            # The last waiter here gave up and revoked the queue lease meanwhile.
            with self._queue_lock:
                self._queue_lease = None
            queue_lease = self.queue_lease().id
            failure[1]["request_put"]["lease"] = queue_lease
            answer = self.client.call("kv/txn", body, f"acquire {key!r}")
        revision = int(answer["header"]["revision"])
        if answer.get("succeeded"):
            self._held[(key, owner)] = Held(lease, ttl)
            self._seen.pop(lkey, None)
            return Grant(True, revision), None
        ranges = [r.get("response_range", {}) for r in answer.get("responses", [])]
        kvs = ranges[0].get("kvs") or []
        if waiter is not None:
            waiter.failed = True
            if joining:
                waiter.joined(revision, b64(mine), ranges[2:], queue_lease)
            else:
                waiter.observed(revision, ranges[1:] if len(ranges) > 1 else None)
        if not kvs:
            # Free, but others queue before us: a queued waiter is woken when the one
            # before it goes.
            return Grant(False, retry_after=WAIT_SLICE if waiter is not None else None), None
        record = Record.parse(kvs[0])
        if record.owner == owner_id(owner):
            # Ours already: a retried request whose answer was lost. Renew it, under the
            # lease it has, and keep the token it got.
            held = Held(LeaseRef(record.lease, 0, sent), ttl)
            self._held[(key, owner)] = held
            if waiter is not None and waiter.queued_at is not None:
                self.client.call("kv/deleterange", {"key": b64(mine)}, f"leave {key!r}'s queue")
                waiter.queued_at = None
            if record.lease != lease.id:
                self.revoke(lease.id)
                if waiter is not None:
                    waiter.lease = held.lease
            token = self._renew(key, owner, held, ttl, record.lease)
            return Grant(token is not None, token), None
        return None, record

    def _unchanged_for(self, key: str, record: Record) -> float:
        """Seconds until the busy ``record`` may be taken over: its ttl, counted from when
        this backend first saw it at its current revision. A holder renews by rewriting its
        record, so an unchanged record is older than our first sight of it, and so is the
        request that the holder's lease is counted from."""
        lkey = lock_key(key)
        now = time.monotonic()
        seen = self._seen.get(lkey)
        if seen is None or seen[0] != record.mod_revision:
            if len(self._seen) >= SEEN_MAX:
                self._seen.pop(next(iter(self._seen)))
            self._seen[lkey] = (record.mod_revision, now)
            return record.ttl
        return record.ttl - (now - seen[1])

    def _take_over(self, key: str, record: Record) -> bool:
        """Delete a record whose holder let its ttl pass, unless it changed meanwhile; its
        lease is revoked so the old holder's next renewal fails."""
        lkey = lock_key(key)
        answer = self.client.call(
            "kv/txn",
            {"compare": [{"key": b64(lkey), "target": "MOD", "result": "EQUAL",
                          "mod_revision": record.mod_revision}],
             "success": [{"request_delete_range": {"key": b64(lkey)}}]},
            f"take over {key!r} from a holder past its ttl",
        )
        self._seen.pop(lkey, None)
        if not answer.get("succeeded"):
            return False
        log.info("took %s over from a holder that let its %g s ttl pass", key, record.ttl)
        self.revoke(record.lease)
        return True

    def _renew(self, key: str, owner: str, held: Held, ttl: float, lease_id: int) -> int | None:
        """Rewrite the record of a lock we hold (its ttl, a new revision for observers) if it
        is still under ``lease_id``, and return its token; None if it is not ours any more.
        The record moves to a new lease when ``ttl`` outgrew the one it has."""
        lkey = lock_key(key)
        lease = held.lease
        if lease.ttl == 0 and not self.keep_alive(lease):  # a lease we did not grant
            self._held.pop((key, owner), None)
            return None
        moved = self.grant(ttl) if lease.ttl < ttl + 2 * LEASE_MARGIN else None
        answer = self.client.call(
            "kv/txn",
            {"compare": [{"key": b64(lkey), "target": "LEASE", "result": "EQUAL",
                          "lease": lease_id}],
             "success": [{"request_put": {"key": b64(lkey), "value": self._value(owner, ttl),
                                          "lease": (moved or lease).id}},
                         {"request_range": {"key": b64(lkey)}}]},
            f"extend {key!r}",
        )
        if not answer.get("succeeded"):
            if moved is not None:
                self.revoke(moved.id)
            self._held.pop((key, owner), None)
            return None
        if moved is not None:
            self.revoke(lease_id)
            held.lease = moved
        held.ttl = ttl
        if not self.fit(held.lease, ttl):
            self._held.pop((key, owner), None)
            return None
        kvs = answer["responses"][1].get("response_range", {}).get("kvs") or [{}]
        return int(kvs[0].get("create_revision", 0)) or None

    def _read(self, key: str) -> Record | None:
        answer = self.client.call(
            "kv/range", {"key": b64(lock_key(key))}, f"read the lock {key!r}"
        )
        kvs = answer.get("kvs") or []
        return Record.parse(kvs[0]) if kvs else None

    def _mine(self, key: str, owner: str) -> tuple[Held, int] | None:
        """Our hold on ``key`` and its lease id: from memory, or read from the store for an
        owner token that came from elsewhere."""
        held = self._held.get((key, owner))
        if held is not None:
            return held, held.lease.id
        record = self._read(key)
        if record is None or record.owner != owner_id(owner):
            return None
        held = Held(LeaseRef(record.lease, 0, 0.0), record.ttl)
        return held, record.lease

    def release(self, key: str, owner: str) -> bool:
        # Revoking our lease deletes the record with it, in one write. Whoever takes the key
        # over or force-releases it revokes our lease, so a lease that is gone means the
        # record was no longer ours.
        found = self._mine(key, owner)
        if found is None:
            return False
        self._held.pop((key, owner), None)
        try:
            self.client.call("lease/revoke", {"ID": found[1]}, f"release {key!r}")
        except LeaseNotFound:
            return False
        finally:
            if self._later:
                self._revoke_pending()
        return True

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        return self.adopt(key, owner, ttl).acquired

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        found = self._mine(key, owner)
        if found is None:
            return Grant(False)
        held, lease_id = found
        self._held[(key, owner)] = held
        token = self._renew(key, owner, held, ttl, lease_id)
        return Grant(False) if token is None else Grant(True, token)

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        made = EtcdWaiter(self, key, owner)
        with self._queue_lock:
            self._waiters[(key, owner)] = made
        return made

    def queue_lease(self) -> LeaseRef:
        """The short lease this backend's waiters put their queue entries under, granted
        when first needed and kept alive while anyone here waits (see ``waiter.QUEUE_TTL``)."""
        with self._queue_grant_lock:  # one lease for every waiter here, granted once
            lease = self._queue_lease
            if lease is not None and (lease.left() >= QUEUE_RENEW or self.keep_alive(lease)):
                return lease
            lease = self.grant(QUEUE_TTL - 2)
            with self._queue_lock:
                self._queue_lease = lease
            return lease

    def queue_lease_alive(self, lease_id: int) -> bool:
        """Renew the queue lease if it runs low; False if ``lease_id`` is not it any more
        (it expired, or an outage dropped it: entries under it are gone)."""
        with self._queue_lock:
            lease = self._queue_lease
        if lease is None or lease.id != lease_id:
            return False
        if lease.left() >= QUEUE_RENEW:
            return True
        if self.keep_alive(lease):
            return True
        with self._queue_lock:
            if self._queue_lease is lease:
                self._queue_lease = None
        return False

    def waiter_closed(self, key: str, owner: str, queued: bool, acquired: bool,
                      reachable: bool) -> None:
        """A waiter is done: leave the queue, and revoke the queue lease with the last
        waiter that gives up (one that got the lock leaves it to the next, or to expire)."""
        with self._queue_lock:
            self._waiters.pop((key, owner), None)
            last = not any(w.queued_at is not None for w in self._waiters.values())
            lease = self._queue_lease
            if not reachable or (last and not acquired):
                self._queue_lease = None  # nobody renews it any more
        if not reachable:
            if queued:
                with self._queue_lock:  # the next attempt here deletes it
                    self._stale_entries = [
                        *self._stale_entries[-STALE_MAX + 1 :], queue_entry(key, owner_id(owner))
                    ]
            return
        if last and not acquired and lease is not None:
            self.revoke(lease.id)  # our entry goes with it
        elif queued and not acquired:
            self.client.call(
                "kv/deleterange", {"key": b64(queue_entry(key, owner_id(owner)))},
                f"leave {key!r}'s queue",
            )

    def revoke_later(self, lease_id: int) -> None:
        """Revoke ``lease_id`` with this backend's next release (or at close)."""
        with self._later_lock:
            self._later.append(lease_id)

    def _revoke_pending(self) -> None:
        with self._later_lock:
            pending, self._later = self._later, []
        for lease_id in pending:
            self.revoke(lease_id)

    def queue_first(self) -> bool:
        # The waiter grants the lease its attempts use, so registering first costs nothing.
        return True

    # -- admin -----------------------------------------------------------------------------------

    def _lease_left(self, lease_id: int) -> float | None:
        try:
            answer = self.client.call(
                "lease/timetolive", {"ID": lease_id}, "read a lease's time to live"
            )
        except BackendError as exc:
            if isinstance(exc, BackendUnavailable):
                raise
            return None
        ttl = int(answer.get("TTL", -1))
        return float(ttl) if ttl >= 0 else None

    def _lease(self, stored: str, record: Record) -> Lease:
        left = self._lease_left(record.lease) if record.lease else None
        return Lease(
            key=stored,
            owner_hint=record.owner[:8],
            token=record.create_revision,
            ttl_remaining=record.ttl if left is None else min(left, record.ttl),
            holder=record.holder,
        )

    def list(self, prefix: str) -> list[Lease]:
        start = lock_key(prefix)
        answer = self.client.call(
            "kv/range",
            {"key": b64(start), "range_end": b64(prefix_end(start)), "sort_target": "KEY"},
            "list locks",
        )
        leases = []
        for kv in answer.get("kvs") or []:
            stored = unb64(kv["key"])[len(LOCKS) :]
            leases.append(self._lease(stored, Record.parse(kv)))
        return sorted(leases, key=lambda lease: lease.key)

    def info(self, key: str) -> Lease | None:
        record = self._read(key)
        return self._lease(key, record) if record is not None else None

    def force_release(self, key: str) -> bool:
        for _ in range(3):
            record = self._read(key)
            if record is None:
                return False
            if self._take_over(key, record):
                return True
        return False

    # -- lifecycle -------------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        # The parent's pooled sockets, waiters and pending revocations are not ours.
        self.client = self._new_client()
        self._later = []
        self._queue_lease = None
        self._held.clear()
        self._waiters.clear()

    def close(self) -> None:
        try:
            if self._queue_lease is not None:
                self.revoke_later(self._queue_lease.id)
            self._revoke_pending()
        except BackendError:
            log.debug("could not revoke spent queue leases; they expire by themselves")
        self.client.close()


def parse_endpoints(url: LockURL) -> list[Endpoint]:
    """``host[:port]`` pairs from ``etcd://h1:2379,h2:2379``; a bad one is a ConfigError."""
    text = url.host or ""
    if url.port is not None:
        text = f"{text}:{url.port}"
    endpoints: list[Endpoint] = []
    for part in text.split(","):
        host, sep, port_text = part.strip().rpartition(":")
        if not sep:
            host, port_text = port_text, str(DEFAULT_PORT)
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(
                f"bad etcd member {part!r} in {url.redacted()}: write each as host:port, "
                "comma-separated, e.g. etcd://10.0.0.1:2379,10.0.0.2:2379"
            )
        endpoints.append((host.strip("[]"), int(port_text)))
    return endpoints
