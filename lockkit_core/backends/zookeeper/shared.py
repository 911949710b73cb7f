"""Read-write locks and semaphores on ZooKeeper: ephemeral sequential nodes, FIFO, few watches.

A read-write lock on a key lives under ``<chroot>/lockkit/rwlocks/k<quoted key>``; its
contenders are ``r-<owner id>-<seq>`` (readers) and ``w-<owner id>-<seq>`` (writers). A writer
holds the lock when its node is first; a reader when no writer's node is ahead of it. So readers
share, writers exclude everyone, and a reader that comes after a queued writer waits behind it
(no writer starves). A semaphore lives under ``<chroot>/lockkit/semaphores/k<quoted key>``,
contenders ``s-<owner id>-<seq>``; the first ``limit`` nodes hold its places.

**Leases.** A node that takes its place writes its lease into its data (``lease_ms``; the
server stamps ``mtime``), and every renewal writes it again. A contender that finds a node
blocking it whose lease ran out on the server's clock (as plain locks judge theirs) deletes it,
unless it was renewed meanwhile (its version says so). A holder's session ending removes its
node too.

**Who wakes whom.** Each waiter watches (existence and data) only what can let it in:

- a writer, the node just ahead of it; a reader, the last writer ahead of it;
- the first waiter of a semaphore (index ``limit``), each of the ``limit`` holders: any of them
  leaving frees the place it is next for; every waiter further back, the node just ahead of it,
  whose taking a place (the data write of its lease) or leaving moves it up.

So a semaphore release wakes the waiter it lets in, and that waiter's taking the place wakes the
one behind it (which starts watching the holders): two wake-ups, never the whole queue.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import BackendUnavailable
from ..base import Grant, Lease, Waiter, owner_id
from .nodes import NodeData, key_node, ordered, remaining_ms

if TYPE_CHECKING:
    from .backend import ZooKeeperBackend

__all__ = ["SharedPlaces"]

_PREFIX = {"read": "r", "write": "w", "slot": "s"}
#: passes of one attempt before it answers busy (each follows a change it raced with)
_ROUNDS = 8


@dataclass
class _Place:
    path: str
    czxid: int
    generation: int
    held: bool = False


def _blocker(children: list[str], index: int, mode: str, limit: int) -> list[str] | None:
    """The nodes whose going (or taking a place) may let ``children[index]`` in, which it
    watches; None when it may hold its place now."""
    if mode == "write":
        return None if index == 0 else [children[index - 1]]
    if mode == "read":
        writers = [c for c in children[:index] if c.startswith("w-")]
        return [writers[-1]] if writers else None
    if index < limit:
        return None
    return children[:limit] if index == limit else [children[index - 1]]


def _holding(children: list[str], limit: int) -> list[str]:
    """The nodes that hold places now."""
    if children and children[0].startswith("s-"):
        return children[:limit]
    return [
        child
        for i, child in enumerate(children)
        if _blocker(children, i, "write" if child.startswith("w-") else "read", 0) is None
    ]


class SharedPlaces:
    """The read-write locks and semaphores of one :class:`ZooKeeperBackend`."""

    def __init__(self, backend: ZooKeeperBackend) -> None:
        self._backend = backend
        self._places: dict[tuple[str, str], _Place] = {}
        self.queued: dict[tuple[str, str], _PlaceWaiter] = {}
        self._lock = threading.Lock()
        #: watch notices delivered to this backend's waiters (what a release costs them)
        self.wakeups = 0

    def _parent(self, key: str, mode: str) -> str:
        kind = "semaphores" if mode == "slot" else "rwlocks"
        return f"{self._backend.tree.root.rpartition('/')[0]}/{kind}/{key_node(key)}"

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._backend.session.call(what, lambda c: getattr(c, method)(*args, **kwargs))

    def _children(self, parent: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            found = self._call(f"list {parent}", "get_children_async", parent)
        except NoNodeError:
            return []
        return ordered(list(found))

    def _mine(self, key: str, owner: str) -> _Place | None:
        with self._lock:
            place = self._places.get((key, owner))
            if place is not None and place.generation != self._backend.session.generation:
                del self._places[(key, owner)]  # its session ended, and the node with it
                return None
            return place

    def try_acquire(self, key: str, owner: str, mode: str, limit: int, ttl: float) -> Grant:
        ms = max(1, int(ttl * 1000))
        waiter = self.queued.get((key, owner))
        parent = self._parent(key, mode)
        for _ in range(_ROUNDS):
            place = self._mine(key, owner)
            if place is None:
                place = self._create(key, owner, mode, parent, ms)
            name = place.path.rpartition("/")[2]
            children = self._children(parent)
            if name not in children:
                # deleted: its lease ran out and a contender removed it, or it was released
                with self._lock:
                    self._places.pop((key, owner), None)
                if place.held:
                    return Grant(False)
                continue
            blockers = _blocker(children, children.index(name), mode, limit)
            if blockers is None:
                if not place.held:
                    self._stamp(place.path, ms)  # also wakes the node behind, if it watches us
                    place.held = True
                return Grant(True, place.czxid)
            busy = self._blocked(key, owner, parent, place, blockers, waiter)
            if busy is not None:
                return busy
        return Grant(False, retry_after=None)

    def _create(self, key: str, owner: str, mode: str, parent: str, ms: int) -> _Place:
        path, stat = self._call(
            f"queue for {key!r}",
            "create_async",
            f"{parent}/{_PREFIX[mode]}-{owner_id(owner)}-",
            NodeData.here(0, wants_ms=ms).encode(),
            ephemeral=True,
            sequence=True,
            makepath=True,
            include_data=True,
        )
        place = _Place(path, int(stat.czxid), self._backend.session.generation)
        with self._lock:
            self._places[(key, owner)] = place
        return place

    def _stamp(self, path: str, ms: int) -> None:
        stat = self._call(f"claim {path}", "set_async", path, NodeData.here(ms).encode())
        self._backend.tree.saw(stat)

    def _blocked(
        self,
        key: str,
        owner: str,
        parent: str,
        place: _Place,
        blockers: list[str],
        waiter: _PlaceWaiter | None,
    ) -> Grant | None:
        """The busy answer for ``place``, blocked by ``blockers`` (watched when ``waiter``
        waits); None to look again (one of them went, or its lease ran out and it was
        removed)."""
        from kazoo.exceptions import NoNodeError

        wake = waiter.wake if waiter is not None else None
        got = self._backend.session.call_all(
            f"watch the queue of {key!r}",
            *(lambda c, b=b: c.get_async(f"{parent}/{b}", wake) for b in blockers),
        )
        if any(isinstance(answer, NoNodeError) for answer in got):
            return None
        now = self._backend.tree.server_now()
        soonest: float | None = None
        for blocker, (raw, stat) in zip(blockers, got, strict=True):
            left = remaining_ms(stat.mtime, NodeData.decode(raw).lease_ms, now)
            if left is None:
                continue  # a waiter ahead of us: bound to its session only
            if left <= 0:
                # its holder stopped renewing: remove it, unless it renewed meanwhile
                backend = self._backend
                backend.session.run(backend.tree.delete(f"{parent}/{blocker}", stat.version))
                return None
            soonest = left if soonest is None else min(soonest, left)
        retry_after = None if soonest is None else soonest / 1000.0
        if waiter is None:
            self._leave(key, owner, parent, place)
            return Grant(False, retry_after=retry_after)
        return Grant(False, retry_after=retry_after or self._backend.session_timeout)

    def _leave(self, key: str, owner: str, parent: str, place: _Place) -> None:
        from kazoo.exceptions import NoNodeError

        with self._lock:
            if self._places.get((key, owner)) is place:
                del self._places[(key, owner)]
        with contextlib.suppress(NoNodeError):
            self._call(f"leave the queue of {key!r}", "delete_async", place.path)
        self._drop_parent(parent)

    def _drop_parent(self, parent: str) -> None:
        client = self._backend.session._client
        if client is not None and client.connected:
            client.delete_async(parent)  # only if empty: a free key costs nothing

    def release(self, key: str, owner: str, mode: str) -> bool:
        from kazoo.exceptions import NoNodeError

        place = self._mine(key, owner)
        with self._lock:
            self._places.pop((key, owner), None)
        if place is None or not place.held:
            return False
        try:
            self._call(f"release {key!r}", "delete_async", place.path)
        except NoNodeError:
            return False  # its lease ran out and a contender removed it
        self._drop_parent(self._parent(key, mode))
        return True

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        """Renew the place this backend holds for ``owner`` (nodes are bound to this
        backend's session: no other process can take one over)."""
        from kazoo.exceptions import NoNodeError

        place = self._mine(key, owner)
        if place is None or not place.held:
            return Grant(False)
        try:
            self._stamp(place.path, max(1, int(ttl * 1000)))
        except NoNodeError:
            with self._lock:
                self._places.pop((key, owner), None)
            return Grant(False)
        return Grant(True, place.czxid)

    def waiter(self, key: str, owner: str, mode: str) -> Waiter:
        return _PlaceWaiter(self, key, owner, mode)

    def holders(self, key: str, mode: str, limit: int) -> list[Lease]:
        from kazoo.exceptions import NoNodeError

        parent = self._parent(key, mode)
        leases = []
        for child in _holding(self._children(parent), limit):
            try:
                raw, stat = self._call(f"read {child}", "get_async", f"{parent}/{child}")
            except NoNodeError:
                continue
            data = NodeData.decode(raw)
            left = remaining_ms(stat.mtime, data.lease_ms, self._backend.tree.server_now())
            if left is not None and left <= 0:
                continue  # its lease is over: the next contender removes it
            kind = {"r": "reader", "w": "writer", "s": "holder"}[child[0]]
            leases.append(
                Lease(
                    key=key,
                    owner_hint=child[2:10],
                    token=int(stat.czxid),
                    ttl_remaining=None if left is None else left / 1000.0,
                    holder=f"{kind}: {data.describe(0)}",
                    started=data.since or None,
                )
            )
        return leases

    def forget_after_fork(self) -> None:
        self._places = {}
        self.queued = {}
        self._lock = threading.Lock()


class _PlaceWaiter(Waiter):
    """Queued for a place: the attempts of its owner keep its node and watch what blocks it
    (see the module docstring); a watch notice wakes it to ask again."""

    def __init__(self, places: SharedPlaces, key: str, owner: str, mode: str) -> None:
        self._places = places
        self._key = key
        self._owner = owner
        self._mode = mode
        self._event = threading.Event()
        places.queued[(key, owner)] = self

    def wake(self, _event: Any) -> None:
        self._places.wakeups += 1
        self._event.set()

    def wait(self, timeout: float) -> Grant | None:
        self._event.wait(max(0.0, timeout))
        self._event.clear()
        return None

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        places = self._places
        places.queued.pop((self._key, self._owner), None)
        if acquired or not reachable:
            return  # kept; or ephemeral: it goes with the session, or when we come back
        place = places._mine(self._key, self._owner)
        if place is not None and not place.held:
            parent = places._parent(self._key, self._mode)
            # unreachable now: the node goes with the session
            with contextlib.suppress(BackendUnavailable):
                places._leave(self._key, self._owner, parent, place)
