"""Queueing a line's waiters in etcd: the ones behind the first, many in one transaction.

The asyncio waiters of one key on one loop stand in a line (:mod:`.line`) and only the first
watches, but every one of them takes its place in etcd's queue as soon as it asks: a waiter of
another process that asks later queues behind them, so waiters are served in the order they
asked across processes too. The places are put together (the waiters that asked in one
iteration of the loop, and those that asked while the last batch was on its way), so a
thousand waiters arriving at once cost a few transactions, not a thousand; they share one
create revision, and the line orders them among themselves.

The first of a line must be queued before all the others: they wait for it on the loop, so
in etcd's queue it would wait for them for ever. Should it lose its entry (the queue lease
ran out while the loop stood still) and queue again behind them, their entries are taken
out, and they queue again behind it (:func:`unqueueing`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import owner_id
from .client import Call, LeaseNotFound, Steps, b64
from .layout import queue_entry

if TYPE_CHECKING:
    from .backend import EtcdBackend
    from .waiter import EtcdWaiter

__all__ = ["BATCH_MAX", "queueing", "unqueueing"]

#: queue entries put in one transaction (etcd takes at most 128 operations in one)
BATCH_MAX = 100


def queueing(backend: EtcdBackend, key: str, waiters: list[EtcdWaiter]) -> Steps[None]:
    """Put the queue entries of ``waiters`` (at most :data:`BATCH_MAX`, none queued yet)
    under the backend's queue lease, in one transaction."""
    for waiter in waiters:
        waiter.join_in_flight = True  # until the answer is read: its entry may be there
    for tries in range(2):
        lease = yield from backend.queue.lease()
        entries = [b64(queue_entry(key, owner_id(waiter.owner))) for waiter in waiters]
        puts = [{"request_put": {"key": e, "value": "", "lease": lease.id}} for e in entries]
        try:
            answer = yield Call("kv/txn", {"success": puts}, f"queue waiters on {key!r}")
            break
        except LeaseNotFound:
            # The queue lease ended meanwhile (nothing was put): once more, on a new one.
            backend.queue.drop_lease()
            if tries:
                raise
    revision = int(answer["header"]["revision"])
    for waiter in waiters:
        waiter.join_in_flight = False
        if waiter.queued_at is None:
            waiter.queued_in_line(revision, lease.id)


def unqueueing(key: str, waiters: list[EtcdWaiter]) -> Steps[None]:
    """Take the queue entries of ``waiters`` out (at most :data:`BATCH_MAX`), in one
    transaction: they queue again, behind the first of their line."""
    deletes = [
        {"request_delete_range": {"key": b64(queue_entry(key, owner_id(waiter.owner)))}}
        for waiter in waiters
    ]
    for waiter in waiters:
        waiter.join_in_flight = True  # (its entry is in doubt until the answer is read)
    yield Call("kv/txn", {"success": deletes}, f"queue {len(deletes)} waiter(s) on {key!r} again")
    for waiter in waiters:
        waiter.join_in_flight = False
        waiter.queued_at = None
