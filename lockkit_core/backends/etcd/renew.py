"""Renewing a lock we hold: rewrite its record (its ttl, a new revision for observers) if it
is still ours, and move it to a longer lease when its ttl outgrew the one it has.

A renewal compares the record's lease *and* the revision of our last write: after a hand-over
in place (:mod:`.handover`) the next holder's record is under the same lease, and a renewal of
the previous holder still on its way must fail, not rewrite the record for its old owner. A
renewal whose compare fails reads the record: if it is still ours (another renewal of ours,
from the watchdog thread and the caller at once, moved its revision) it tries again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..base import owner_id
from .client import Call, Steps, b64
from .layout import Held, Record, lock_key
from .leases import LEASE_MARGIN

if TYPE_CHECKING:
    from .backend import EtcdBackend

__all__ = ["renew_body", "renewing", "still_ours"]

#: a renewal's tries when renewals of ours race (each moves the revision the other compares)
TRIES = 3


def renewing(
    backend: EtcdBackend, key: str, owner: str, held: Held, ttl: float, lease_id: int
) -> Steps[int | None]:
    """Rewrite ``owner``'s record of ``key`` if it is still ours under ``lease_id``, and
    return its token; None if it is not ours any more (``held`` is then forgotten)."""
    leases = backend.leases
    lease = held.lease
    if lease.ttl == 0 and not (yield from leases.keep_alive(lease)):
        backend.forget(key, owner)  # a lease we did not grant, and gone
        return None
    moved = None
    if lease.ttl < ttl + 2 * LEASE_MARGIN:
        moved = yield from leases.grant(ttl)
    value = backend.record_value(owner, ttl, held.started, held.token)
    answer: dict[str, Any] = {}
    for _ in range(TRIES):
        body = renew_body(key, held, lease_id, value, (moved or lease).id)
        answer = yield Call("kv/txn", body, f"extend {key!r}")
        if answer.get("succeeded") or not still_ours(answer, owner_id(owner), held, lease_id):
            break
    if not answer.get("succeeded"):
        if moved is not None:
            yield from leases.revoke(moved.id)
        backend.forget(key, owner)
        return None
    held.mod = int(answer["header"]["revision"])
    if moved is not None:
        yield from leases.revoke(lease_id)
        held.lease = moved
    held.ttl = ttl
    if not (yield from leases.fit(held.lease, ttl)):
        backend.forget(key, owner)
        return None
    kvs = answer["responses"][1].get("response_range", {}).get("kvs")
    held.fence = Record.parse(kvs[0]).fence if kvs else None
    return held.fence


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
