"""``EtcdBackend``: leases, the create-if-absent transaction, take-overs and the admin reads."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import BackendError, BackendUnavailable
from ...url import LockURL
from ..aio import PerLoop
from ..base import Backend, Capability, Grade, Grant, Lease, Waiter, owner_id
from .admin import lease_of, list_leases
from .client import Call, LeaseNotFound, Steps, b64
from .connection import gateway_client
from .layout import (
    Held,
    LeaseRef,
    Record,
    lock_key,
    queue_entry,
)
from .leases import Leases
from .queue import WaitQueue
from .renew import renewing
from .txn import acquire_body, take_over_body
from .waiter import WAIT_SLICE, EtcdWaiter

if TYPE_CHECKING:
    from .line import EtcdOps

__all__ = ["EtcdBackend"]

log = logging.getLogger("lockkit.etcd")

#: revisions of busy records remembered for take-overs (oldest forgotten first)
SEEN_MAX = 4096


#: how many fresh queue leases one attempt takes when waiters giving up revoke them under it
QUEUE_LEASE_TRIES = 4


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
        | Capability.HAND_OFF
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
        self.client = gateway_client(url, self.options)
        self.leases = Leases(self.client)
        self.queue = WaitQueue(self.leases)
        self._holder = f"{socket.gethostname()} pid "
        self._held: dict[tuple[str, str], Held] = {}
        self._seen: dict[str, tuple[int, float]] = {}
        self._aio: PerLoop[EtcdOps] = PerLoop()

    # -- locking ---------------------------------------------------------------------------------

    def record_value(
        self, owner: str, ttl: float, started: float | None, token: int | None = None
    ) -> str:
        return Record.value(owner_id(owner), ttl, self._holder + str(os.getpid()), started, token)

    def held(self, key: str, owner: str) -> Held | None:
        """What we know of ``owner``'s hold on ``key``, if it holds it from here."""
        return self._held.get((key, owner))

    def forget(self, key: str, owner: str) -> None:
        """``owner`` no longer holds ``key`` (its renewal found it gone)."""
        self._held.pop((key, owner), None)

    def handed(self, key: str, owner: str, to: str, held: Held) -> None:
        """``owner``'s hold on ``key`` went to ``to`` in place (see :mod:`.handover`)."""
        self._held.pop((key, owner), None)
        self._held[(key, to)] = held
        self._seen.pop(lock_key(key), None)

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        return self.client.run(self.attempt(key, owner, ttl))

    def attempt(self, key: str, owner: str, ttl: float) -> Steps[Grant]:
        """:meth:`try_acquire`'s requests and decisions (run blocking or on a loop)."""
        yield from self.leases.revoke_abandoned()
        waiter = self.queue.get(key, owner)
        if waiter is not None:
            lease = yield from waiter.lock_lease(ttl)
        else:
            lease = yield from self.leases.grant(ttl)
        acquired = False
        reachable = True
        try:
            for _ in range(2):  # once more after taking over from a holder that stopped
                if not (yield from self.leases.fit(lease, ttl)):
                    yield from self.leases.revoke(lease.id)
                    lease = yield from self.leases.grant(ttl)
                    if waiter is not None:
                        waiter.lease = lease
                grant, record = yield from self._attempt(key, owner, ttl, lease, waiter)
                if grant is not None:
                    acquired = grant.acquired
                    return grant
                assert record is not None
                left = self._unchanged_for(key, record)
                if left > 0:
                    return Grant(False, retry_after=left)
                yield from self._take_over(key, record)
            return Grant(False, retry_after=None)
        except (BackendUnavailable, GeneratorExit):
            # Another round trip would cost the caller another timeout; a caller that left
            # (cancelled) makes none either: the revoker thread does it.
            reachable = False
            raise
        finally:
            if not acquired and waiter is None:
                yield from self.leases.revoke(lease.id, reachable=reachable)

    def _attempt(
        self, key: str, owner: str, ttl: float, lease: LeaseRef, waiter: EtcdWaiter | None
    ) -> Steps[tuple[Grant | None, Record | None]]:
        """One create-if-absent transaction: a grant, or the busy record (None, record), or
        (``Grant(False)``, None) when the key is free but others queue before us."""
        lkey = lock_key(key)
        mine = queue_entry(key, owner_id(owner))
        # A waiter joins the queue in its attempt once it has failed one, or at once when
        # this backend has a queue lease already (it waits often): a free key costs no
        # queue lease.
        joining = (
            waiter is not None
            and waiter.queued_at is None
            and (waiter.failed or self.queue.has_lease)
        )
        queue_lease = (yield from self.queue.lease()).id if joining else None
        stale = self.queue.take_stale()
        started = time.time()

        def body() -> dict[str, Any]:
            return acquire_body(
                key,
                owner_id(owner),
                self.record_value(owner, ttl, started),
                lease.id,
                queued_at=waiter.queued_at if waiter is not None else None,
                queue_lease=queue_lease,
                stale=stale,
            )

        sent = time.monotonic()
        tries = 0
        while True:
            if joining:
                assert waiter is not None
                waiter.join_in_flight = True  # until the answer is read (see leaving())
            try:
                answer = yield Call("kv/txn", body(), f"acquire {key!r}")
                break
            except LeaseNotFound:
                tries += 1
                if not joining or tries > QUEUE_LEASE_TRIES:
                    raise
                # The last waiter here gave up and revoked the queue lease meanwhile (in an
                # asyncio storm of cancelled waiters, the new one too, now and then).
                self.queue.drop_lease()
                queue_lease = (yield from self.queue.lease()).id
        if waiter is not None:
            waiter.join_in_flight = False
        revision = int(answer["header"]["revision"])
        if answer.get("succeeded"):
            self._held[(key, owner)] = Held(lease, ttl, started, mod=revision, fence=revision)
            self._seen.pop(lkey, None)
            return Grant(True, revision), None
        ranges = [r.get("response_range", {}) for r in answer.get("responses", [])]
        kvs = ranges[0].get("kvs") or []
        if waiter is not None:
            waiter.failed = True
            if joining:
                assert queue_lease is not None
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
            held = Held(
                LeaseRef(record.lease, 0, sent),
                ttl,
                record.started,
                token=record.token,
                mod=record.mod_revision,
                fence=record.fence,
            )
            self._held[(key, owner)] = held
            if waiter is not None and waiter.queued_at is not None:
                yield Call("kv/deleterange", {"key": b64(mine)}, f"leave {key!r}'s queue")
                waiter.queued_at = None
            if record.lease != lease.id:
                yield from self.leases.revoke(lease.id)
                if waiter is not None:
                    waiter.lease = held.lease
            token = yield from renewing(self, key, owner, held, ttl, record.lease)
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

    def _take_over(self, key: str, record: Record) -> Steps[bool]:
        """Delete a record whose holder let its ttl pass, unless it changed meanwhile; its
        lease is revoked so the old holder's next renewal fails."""
        lkey = lock_key(key)
        answer = yield Call(
            "kv/txn",
            take_over_body(lkey, record.mod_revision),
            f"take over {key!r} from a holder past its ttl",
        )
        self._seen.pop(lkey, None)
        if not answer.get("succeeded"):
            return False
        log.info("took %r over from a holder that let its %g s ttl pass", key, record.ttl)
        yield from self.leases.revoke(record.lease)
        return True

    def _read(self, key: str) -> Steps[Record | None]:
        answer = yield Call("kv/range", {"key": b64(lock_key(key))}, f"read the lock {key!r}")
        kvs = answer.get("kvs") or []
        return Record.parse(kvs[0]) if kvs else None

    def _mine(self, key: str, owner: str) -> Steps[tuple[Held, int] | None]:
        """Our hold on ``key`` and its lease id: from memory, or read from the store for an
        owner token that came from elsewhere."""
        held = self._held.get((key, owner))
        if held is not None:
            return held, held.lease.id
        record = yield from self._read(key)
        if record is None or record.owner != owner_id(owner):
            return None
        held = Held(
            LeaseRef(record.lease, 0, 0.0),
            record.ttl,
            record.started,
            token=record.token,
            mod=record.mod_revision,
            fence=record.fence,
        )
        return held, record.lease

    def release(self, key: str, owner: str) -> bool:
        return self.client.run(self.releasing(key, owner))

    def releasing(self, key: str, owner: str) -> Steps[bool]:
        """:meth:`release`'s requests and decisions."""
        # Revoking our lease deletes the record with it, in one write. Whoever takes the key
        # over or force-releases it revokes our lease, so a lease that is gone means the
        # record was no longer ours.
        found = yield from self._mine(key, owner)
        if found is None:
            return False
        self._held.pop((key, owner), None)
        try:
            yield Call("lease/revoke", {"ID": found[1]}, f"release {key!r}")
        except LeaseNotFound:
            return False
        return True

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        return self.adopt(key, owner, ttl).acquired

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        return self.client.run(self.adopting(key, owner, ttl))

    def adopting(self, key: str, owner: str, ttl: float) -> Steps[Grant]:
        """:meth:`adopt`'s (and :meth:`extend`'s) requests and decisions."""
        # Renewals come here: a kit that only holds cleans up too.
        yield from self.leases.revoke_abandoned()
        found = yield from self._mine(key, owner)
        if found is None:
            return Grant(False)
        held, lease_id = found
        self._held[(key, owner)] = held
        token = yield from renewing(self, key, owner, held, ttl, lease_id)
        return Grant(False) if token is None else Grant(True, token)

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        # fair or not, waiters queue (see .waiter): fair=True costs nothing more
        made = EtcdWaiter(self, key, owner)
        self.queue.register(key, owner, made)
        return made

    def aio(self) -> EtcdOps:
        """The same plans of requests over asyncio streams of the running loop (one pool of
        connections per loop, made on first use); watches read on the loop."""
        from .line import EtcdOps

        return self._aio.get(lambda: EtcdOps(self))

    def queue_first(self) -> bool:
        # The waiter grants the lease its attempts use, so registering first costs nothing.
        return True

    # -- admin -----------------------------------------------------------------------------------

    def list(self, prefix: str) -> list[Lease]:
        return list_leases(self.client, prefix)

    def info(self, key: str) -> Lease | None:
        record = self.client.run(self._read(key))
        return lease_of(self.client, key, record) if record is not None else None

    def force_release(self, key: str) -> bool:
        for _ in range(3):
            record = self.client.run(self._read(key))
            if record is None:
                return False
            if self.client.run(self._take_over(key, record)):
                return True
        return False

    # -- lifecycle -------------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        # The parent's pooled sockets, waiters and threads are not ours.
        self.client = gateway_client(self.url, self.options)
        self.leases = Leases(self.client)
        self.queue = WaitQueue(self.leases)
        self._held.clear()

    def close(self) -> None:
        self.leases.close()
        try:
            self.queue.close()
        except BackendError:
            log.debug("could not revoke the queue lease; it expires by itself")
        self.client.close()
