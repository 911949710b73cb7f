"""The admin reads of zookeeper://: who holds a key, the held keys, and force-release."""

from __future__ import annotations

from ..base import Lease
from .nodes import NodeData, node_key, remaining_ms
from .session import Session
from .tree import LockTree, op

__all__ = ["force_release", "list_leases", "read_lease"]


def read_lease(session: Session, tree: LockTree, key: str) -> Lease | None:
    """The lease of the head node of ``key``'s queue, or None if the key is free."""
    from kazoo.exceptions import NoNodeError

    run = session.run
    children = run(tree.children(key))
    if not children:
        return None
    head = f"{tree.parent(key)}/{children[0]}"
    try:
        raw, stat = run(tree.call(f"read the holder of {key!r}", lambda c: c.get_async(head)))
    except NoNodeError:
        return None
    data = NodeData.decode(raw)
    left = remaining_ms(stat.mtime, data.lease_ms, tree.server_now())
    if left is not None and left <= 0:
        return None  # its lease is over: the next contender removes it
    return Lease(
        key=key,
        owner_hint=children[0][:8],  # an owner id starts with its hint
        token=int(stat.czxid),
        ttl_remaining=None if left is None else left / 1000.0,
        holder=data.describe(len(children) - 1),
        started=data.since or None,
        waiters=len(children) - 1,
    )


def list_leases(session: Session, tree: LockTree, prefix: str) -> list[Lease]:
    """The held keys that start with ``prefix``, sorted."""
    from kazoo.exceptions import NoNodeError

    try:
        names = session.run(tree.call("list locks", op("get_children_async", tree.root)))
    except NoNodeError:
        return []
    keys = sorted(k for k in map(node_key, names) if k is not None and k.startswith(prefix))
    leases = [read_lease(session, tree, k) for k in keys]
    return [lease for lease in leases if lease is not None]


def force_release(session: Session, tree: LockTree, key: str) -> bool:
    """Delete the head node of ``key``'s queue, whoever holds it; False if it was free."""
    children = session.run(tree.children(key))
    if not children:
        return False
    done = session.run(tree.delete(f"{tree.parent(key)}/{children[0]}"))
    tree.drop_parent(key)
    return done
