"""The ``kv/txn`` bodies of acquire (create-if-absent, keeping the wait queue) and take-over.

It succeeds only when the key has no record and nobody queues before the caller; then it puts
the record (under the caller's lock lease) and takes the caller's queue entry out. When it
fails, its responses show the record, and for a queued caller its entry and the one before it
(or for a caller joining the queue: its new entry and the newest two), in that order.
"""

from __future__ import annotations

from typing import Any

from .client import b64
from .layout import lock_key, prefix_end, queue_entry, queue_prefix

__all__ = ["acquire_body", "take_over_body"]


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
