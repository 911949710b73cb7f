"""The ``kv/txn`` bodies of acquire (create-if-absent, keeping the wait queue) and take-over.

It succeeds only when the key has no record and nobody queues before the caller; then it puts
the record (under the caller's lock lease) and takes the caller's queue entry out. When it
fails, its responses show the record, and for a queued caller its entry and the one before it
(or for a caller joining the queue: its new entry and the newest two), in that order.
"""

from __future__ import annotations

from typing import Any

from .client import b64
from .layout import Held, Record, lock_key, prefix_end, queue_entry, queue_prefix

__all__ = ["acquire_body", "renew_body", "still_ours", "take_over_body"]


def acquire_body(
    key: str,
    owner_id: str,
    value: str,
    lease_id: int,
    *,
    queued_at: int | None,
    queue_lease: int | None,
    stale: list[str],
) -> dict[str, Any]:
    """The ``kv/txn`` body. ``queued_at``: the create revision of the caller's queue entry
    (None if not queued); ``queue_lease``: join the queue under this lease when the attempt
    fails (None: do not join); ``stale``: queue entries to delete either way."""
    lkey = b64(lock_key(key))
    queue = queue_prefix(key)
    span = {"key": b64(queue), "range_end": b64(prefix_end(queue))}
    mine = b64(queue_entry(key, owner_id))
    compare: list[dict[str, Any]] = [
        {"key": lkey, "target": "VERSION", "result": "EQUAL", "version": 0}
    ]
    success: list[dict[str, Any]] = [
        {"request_put": {"key": lkey, "value": value, "lease": lease_id}}
    ]
    failure: list[dict[str, Any]] = [{"request_range": {"key": lkey}}]
    if queued_at is not None:
        # We are first if every queued entry was created no earlier than ours.
        compare.append(
            {**span, "target": "CREATE", "result": "GREATER", "create_revision": queued_at - 1}
        )
        success.append({"request_delete_range": {"key": mine}})
        failure.append({"request_range": {"key": mine}})
        failure.append(
            {
                "request_range": {
                    **span,
                    "max_create_revision": queued_at - 1,
                    "sort_order": "DESCEND",
                    "sort_target": "CREATE",
                    "limit": 1,
                    "keys_only": True,
                }
            }
        )
    else:
        # Queued waiters go first: take the key only when nobody queues.
        compare.append({**span, "target": "VERSION", "result": "EQUAL", "version": 0})
        if queue_lease is not None:
            failure.append({"request_put": {"key": mine, "value": "", "lease": queue_lease}})
            failure.append({"request_range": {"key": mine, "keys_only": True}})
            failure.append(
                {
                    "request_range": {
                        **span,
                        "sort_order": "DESCEND",
                        "sort_target": "CREATE",
                        "limit": 2,
                        "keys_only": True,
                    }
                }
            )
    for entry in stale:
        cleanup = {"request_delete_range": {"key": b64(entry)}}
        success.append(cleanup)
        failure.append(cleanup)
    return {"compare": compare, "success": success, "failure": failure}


def take_over_body(lkey: str, mod_revision: int) -> dict[str, Any]:
    """The ``kv/txn`` body that deletes the record at ``lkey`` unless it changed since
    ``mod_revision`` (a holder that renewed meanwhile keeps its lock)."""
    return {
        "compare": [
            {"key": b64(lkey), "target": "MOD", "result": "EQUAL", "mod_revision": mod_revision}
        ],
        "success": [{"request_delete_range": {"key": b64(lkey)}}],
    }


def renew_body(key: str, held: Held, lease_id: int, value: str, new_lease: int) -> dict[str, Any]:
    """The ``kv/txn`` body that rewrites our record at ``key`` (under ``new_lease``) if it is
    still under ``lease_id`` and, when ``held`` knows it, still at the revision of our last
    write: after a hand-over in place the next holder's record is under the same lease, and
    a renewal of the previous holder still on its way must not take it back. When it fails,
    its response is the record, to tell another renewal of ours from a loss."""
    lkey = b64(lock_key(key))
    compare: list[dict[str, Any]] = [
        {"key": lkey, "target": "LEASE", "result": "EQUAL", "lease": lease_id}
    ]
    if held.mod:
        compare.append({"key": lkey, "target": "MOD", "result": "EQUAL", "mod_revision": held.mod})
    return {
        "compare": compare,
        "success": [
            {"request_put": {"key": lkey, "value": value, "lease": new_lease}},
            {"request_range": {"key": lkey}},
        ],
        "failure": [{"request_range": {"key": lkey}}],
    }


def still_ours(answer: dict[str, Any], owner_id: str, held: Held, lease_id: int) -> bool:
    """After a renewal's compare failed: True if the record it read is still ``owner_id``'s
    under ``lease_id`` (another renewal of ours changed its revision meanwhile), and ``held``
    now knows its revision; False if it went to someone else or is gone."""
    kvs = answer["responses"][0].get("response_range", {}).get("kvs")
    if not kvs:
        return False
    record = Record.parse(kvs[0])
    if record.owner != owner_id or record.lease != lease_id:
        return False
    held.mod, held.token = record.mod_revision, record.token
    return True
