"""Read-write locks and semaphores on ZooKeeper: ephemeral sequential nodes, FIFO, one watch.

A read-write lock on a key lives under ``<chroot>/lockkit/rwlocks/k<quoted key>``; its
contenders are ``r-<owner id>-<seq>`` (readers) and ``w-<owner id>-<seq>`` (writers). A writer
holds the lock when its node is first; a reader when no writer's node is ahead of it. So readers
share, writers exclude everyone, and a reader that comes after a queued writer waits behind it
(no writer starves). Each waiter watches one node: a writer its predecessor, a reader the last
writer ahead of it.

A semaphore lives under ``<chroot>/lockkit/semaphores/k<quoted key>``, contenders
``s-<owner id>-<seq>``; the first ``limit`` nodes hold its places. A waiter watches the list of
contenders (any holder leaving may free a place for it), so a release wakes every waiter of that
semaphore once; they are few, as the queue is.

These places are bound to the session only: no per-place ttl and no renewal; a holder that dies
frees its place within the session timeout. Tokens are the node's ``czxid``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, BackendUnavailable
from ..base import Lease, owner_id
from .nodes import NodeData, key_node, ordered

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

__all__ = ["SharedPlaces"]

_PREFIX = {"read": "r", "write": "w", "slot": "s"}


@dataclass
class _Place:
    path: str
    czxid: int
    generation: int


def _blocker(children: list[str], index: int, mode: str, limit: int) -> str | None:
    """The node whose going may let ``children[index]`` in; ``""`` for "any of the holders"
    (a semaphore); None when it holds its place now."""
    if mode == "write":
        return None if index == 0 else children[index - 1]
    if mode == "read":
        writers = [c for c in children[:index] if c.startswith("w-")]
        return writers[-1] if writers else None
    return None if index < limit else ""


def _holding(children: list[str], limit: int) -> list[str]:
    """The nodes that hold places now."""
    if children and children[0].startswith("s-"):
        return children[:limit]
    holders = []
    for i, child in enumerate(children):
        if _blocker(children, i, "write" if child.startswith("w-") else "read", 0) is None:
            holders.append(child)
    return holders


class SharedPlaces:
    """The read-write locks and semaphores of one :class:`ZooKeeperBackend`."""

    def __init__(self, backend: ZooKeeperBackend) -> None:
        self._backend = backend
        self._places: dict[tuple[str, str], _Place] = {}
        self._lock = threading.Lock()

    def _parent(self, key: str, mode: str) -> str:
        kind = "semaphores" if mode == "slot" else "rwlocks"
        return f"{self._backend.tree.root.rpartition('/')[0]}/{kind}/{key_node(key)}"

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._backend.session.call(what, lambda c: getattr(c, method)(*args, **kwargs))

    def _children(self, parent: str, watch: Any = None) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            found = self._call(f"list {parent}", "get_children_async", parent, watch)
        except NoNodeError:
            return []
        return ordered(list(found))

    def acquire(
        self, key: str, owner: str, mode: str, limit: int, timeout: float | None
    ) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        parent = self._parent(key, mode)
        prefix = f"{parent}/{_PREFIX[mode]}-{owner_id(owner)}-"
        path, stat = self._call(
            f"queue for {key!r}",
            "create_async",
            prefix,
            NodeData.here(0).encode(),
            ephemeral=True,
            sequence=True,
            makepath=True,
            include_data=True,
        )
        name = path.rpartition("/")[2]
        event = threading.Event()

        def wake(_: Any) -> None:
            event.set()

        held = False
        reachable = True
        try:
            while True:
                children = self._children(parent, wake if mode == "slot" else None)
                if name not in children:
                    raise BackendError(f"our place in the queue of {key!r} vanished")
                blocker = _blocker(children, children.index(name), mode, limit)
                if blocker is None:
                    held = True
                    with self._lock:
                        self._places[(key, owner)] = _Place(
                            path, int(stat.czxid), self._backend.session.generation
                        )
                    return int(stat.czxid)
                if (
                    blocker
                    and self._call(
                        f"watch the queue of {key!r}", "exists_async", f"{parent}/{blocker}", wake
                    )
                    is None
                ):
                    continue
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                event.wait(remaining)
                event.clear()
        except BackendUnavailable:
            reachable = False
            raise
        finally:
            if not held:
                self._leave(key, parent, path, reachable)

    def _leave(self, key: str, parent: str, path: str, reachable: bool) -> None:
        if not reachable:
            return  # ephemeral: it goes with the session; a live session keeps it until then
        from kazoo.exceptions import NoNodeError

        with contextlib.suppress(NoNodeError):
            self._call(f"leave the queue of {key!r}", "delete_async", path)
        client = self._backend.session._client
        if client is not None and client.connected:
            client.delete_async(parent)  # only if empty: a free key costs nothing

    def release(self, key: str, owner: str, mode: str) -> bool:
        from kazoo.exceptions import NoNodeError

        with self._lock:
            place = self._places.pop((key, owner), None)
        if place is None or place.generation != self._backend.session.generation:
            return False
        parent = self._parent(key, mode)
        try:
            self._call(f"release {key!r}", "delete_async", place.path)
        except NoNodeError:
            return False
        client = self._backend.session._client
        if client is not None and client.connected:
            client.delete_async(parent)
        return True

    def holders(self, key: str, mode: str, limit: int) -> list[Lease]:
        from kazoo.exceptions import NoNodeError

        parent = self._parent(key, mode)
        children = self._children(parent)
        leases = []
        for child in _holding(children, limit):
            try:
                raw, stat = self._call(f"read {child}", "get_async", f"{parent}/{child}")
            except NoNodeError:
                continue
            data = NodeData.decode(raw)
            kind = {"r": "reader", "w": "writer", "s": "holder"}[child[0]]
            leases.append(
                Lease(
                    key=key,
                    owner_hint=child[2:10],
                    token=int(stat.czxid),
                    ttl_remaining=None,
                    holder=f"{kind}: {data.describe(0)}",
                    started=data.since or None,
                )
            )
        return leases

    def forget_after_fork(self) -> None:
        self._places = {}
        self._lock = threading.Lock()
