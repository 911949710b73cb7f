"""A hand-over in place: the lock passes from a holder of this process to a waiter of this
process in one transaction, instead of a lease revoke, a woken waiter's read, try and watch.

The transaction compares that the record is still the holder's (its lease and the revision of
our last write) and that the waiter is first in the key's queue (or, unqueued, that nobody
queues); it then rewrites the record for the waiter under the same lease and deletes the
waiter's queue entry (the waiters behind it are queued already, see :mod:`.batch`). The record's
create revision stays, so the token is carried in its value: the last holder's plus one.
That is never more than the hand-over's own revision (every earlier token was at most the
revision it was given at, and each hand-over is a write), so any record created afterwards
still gets a higher one: tokens keep rising across holders and processes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..base import Grant, owner_id
from .client import Call, Steps, b64
from .layout import Held, lock_key, prefix_end, queue_entry, queue_prefix

if TYPE_CHECKING:
    from .backend import EtcdBackend
    from .waiter import EtcdWaiter

__all__ = ["handing_over", "handover_body"]


def handover_body(
    key: str, held: Held, value: str, *, queued_at: int | None, entry: str
) -> dict[str, Any]:
    """The ``kv/txn`` body: put ``value`` (the waiter's record) under the holder's lease if
    the record is still at the holder's last write and the waiter (queued at ``queued_at``,
    its queue entry ``entry``; None: not queued, then nobody may queue) goes first, and
    delete the waiter's entry."""
    lkey = b64(lock_key(key))
    queue = queue_prefix(key)
    span = {"key": b64(queue), "range_end": b64(prefix_end(queue))}
    compare: list[dict[str, Any]] = [
        {"key": lkey, "target": "LEASE", "result": "EQUAL", "lease": held.lease.id},
        {"key": lkey, "target": "MOD", "result": "EQUAL", "mod_revision": held.mod},
    ]
    success: list[dict[str, Any]] = [
        {"request_put": {"key": lkey, "value": value, "lease": held.lease.id}}
    ]
    if queued_at is not None:
        compare.append(
            {**span, "target": "CREATE", "result": "GREATER", "create_revision": queued_at - 1}
        )
        success.append({"request_delete_range": {"key": b64(entry)}})
    else:
        compare.append({**span, "target": "VERSION", "result": "EQUAL", "version": 0})
    return {"compare": compare, "success": success}


def handing_over(
    backend: EtcdBackend,
    key: str,
    owner: str,
    to: EtcdWaiter,
    ttl: float,
    after: EtcdWaiter | None,
) -> Steps[Grant | None]:
    """Release ``owner``'s lock on ``key`` by handing it to the waiter ``to`` (which asks
    for ``ttl``); the waiter's grant, or None when it cannot be done so (nothing changed:
    release as usual). ``after``, the next waiter here, gets the lock lease ``to`` no longer
    needs. An error leaves it unknown whether it was done: releasing as usual then frees the
    key either way (the record is under the holder's lease)."""
    held = backend.held(key, owner)
    if held is None or not held.mod or held.fence is None or held.lease.ttl == 0:
        return None  # a hold adopted from elsewhere, or one we know too little of
    if not (yield from backend.leases.fit(held.lease, ttl)):
        return None  # its lease cannot cover the waiter's ttl: a fresh grant will
    token = held.fence + 1
    started = time.time()
    value = backend.record_value(to.owner, ttl, started, token)
    body = handover_body(
        key, held, value, queued_at=to.queued_at, entry=queue_entry(key, owner_id(to.owner))
    )
    sent = time.monotonic()
    answer = yield Call("kv/txn", body, f"hand {key!r} over")
    if not answer.get("succeeded"):
        return None
    revision = int(answer["header"]["revision"])
    backend.handed(key, owner, to.owner, Held(held.lease, ttl, started, token, revision, token))
    to.handed()
    if after is not None:
        to.pass_lease(after)
    return Grant(True, token, since=sent)
