"""``ZooKeeperBackend``: lock nodes, the lease on the holder's node, and the admin reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote

from ...errors import BackendUnavailable
from ...url import LockURL
from ..aio import PerLoop
from ..base import Backend, Capability, Grade, Grant, Lease, Waiter, owner_id
from .admin import force_release, list_leases, read_lease
from .aio import Sender, ZooKeeperOps
from .claims import UNSENT, Claims, claim_delay
from .nodes import NodeData, node_owner
from .queue import behind
from .session import Session, Steps, client_kwargs, ensemble
from .shared import SharedPlaces
from .tree import LockTree, Mine, Nodes, op
from .waiter import ZooKeeperWaiter

if TYPE_CHECKING:
    from ...hold import Hold
    from ..aio import AsyncOps

__all__ = ["ZooKeeperBackend"]

#: attempts in one try_acquire before it answers "busy" (each follows a change it raced with)
_ROUNDS = 8


class ZooKeeperBackend(Backend):
    """A ZooKeeper ensemble through one kazoo client (one session) per backend."""

    schemes: ClassVar[tuple[str, ...]] = ("zookeeper",)
    extra: ClassVar[str | None] = "zookeeper"
    requires: ClassVar[str | None] = "kazoo"
    capabilities: ClassVar[Capability] = (
        Capability.TTL
        | Capability.FENCING
        | Capability.FAIR
        | Capability.NOTIFY
        | Capability.CROSS_PROCESS
        | Capability.CROSS_HOST
        | Capability.LIST
        | Capability.SHARED
    )
    grade: ClassVar[Grade] = Grade.CONSENSUS
    option_types: ClassVar[Mapping[str, type]] = {
        "session_timeout": float,
        "socket_timeout": float,
        "auth": str,
        "username": str,
        "password": str,
        "sasl_mechanism": str,
        "acl": str,
        "use_ssl": bool,
        "verify_certs": bool,
        "certfile": str,
        "keyfile": str,
        "ca": str,
    }

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        netloc, chroot = ensemble(url)
        self.check_seconds("session_timeout", "socket_timeout")
        username = unquote(url.username) if url.username else None
        kwargs = client_kwargs(netloc, username, url.password, self.options)
        self.session = Session(kwargs, self.options.get("socket_timeout", 5.0), url.redacted())
        self.session.on_reconnect = self._sweep
        self.tree = LockTree(self.session, chroot + "/lockkit/locks")
        self._nodes = Nodes()
        self._queued: dict[tuple[str, str], ZooKeeperWaiter] = {}
        self._shared = SharedPlaces(self)
        self._claims = Claims(self.session, self.tree)
        self._session_timeout = float(kwargs["timeout"])
        #: makes the kazoo calls of asyncio callers (see .aio), started on first use
        self.sender = Sender()
        self._aio: PerLoop[ZooKeeperOps] = PerLoop()

    def _sweep(self) -> None:
        self.session.run(self._sweeping())

    def _sweeping(self) -> Steps[None]:
        yield from self.tree.sweep({mine.path for mine in self._nodes.values()})

    # -- our nodes ----------------------------------------------------------------------------

    def _mine(self, key: str, owner: str) -> Mine | None:
        mine = self._nodes.get((key, owner))
        if mine is not None and mine.generation != self.session.generation:
            self._nodes.pop((key, owner), None)  # its session ended: the node is gone
            return None
        return mine

    def _find(self, key: str, owner: str) -> Steps[tuple[Mine | None, list[str]]]:
        """Our node for ``owner`` (from memory, else by its owner id among the children)."""
        from kazoo.exceptions import NoNodeError

        children = yield from self.tree.children(key)
        mine = self._mine(key, owner)
        if mine is not None:
            return mine, children
        oid = owner_id(owner)
        for child in children:
            if node_owner(child) == oid:
                path = f"{self.tree.parent(key)}/{child}"
                try:
                    raw, stat = yield from self.tree.call(f"read {path}", op("get_async", path))
                except NoNodeError:
                    return None, children
                # The head holds the lock, claimed or not yet (see claims.py).
                data = NodeData.decode(raw)
                claimed = data.lease_ms > 0 or child == children[0]
                return Mine(
                    path,
                    stat.czxid,
                    stat.version,
                    claimed,
                    self.session.generation,
                    since=data.since if claimed else 0.0,
                ), children
        return None, children

    def _let_go(self, key: str, owner: str) -> None:
        """After ``owner``'s node on ``key`` is deleted: remove the key's parent if it is
        empty, unless another node of this process is still on it or being deleted. Its
        owner comes here too, after its own delete is answered, so the parent is not left
        behind; and a hand-over within this process is the release alone, with no read of
        whether the key is free."""
        if self._nodes.left(key, owner, self.session.generation):
            self.tree.drop_parent(key)

    # -- locking ------------------------------------------------------------------------------

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        return self.session.run(self.attempt(key, owner, ttl))

    def attempt(self, key: str, owner: str, ttl: float) -> Steps[Grant]:
        """:meth:`try_acquire`'s requests and decisions (run blocking or on a loop)."""
        if self.tree.has_orphans():
            yield from self._sweeping()
        ms = max(1, int(ttl * 1000))
        oid = owner_id(owner)
        waiter = self._queued.get((key, owner))
        parent = self.tree.parent(key)
        for _ in range(_ROUNDS):
            mine = self._mine(key, owner)
            if mine is not None and waiter is not None and waiter.head_gone():
                # We were next and the head's node is gone: no node can come before ours, so
                # we hold the lock now. The claim that stamps our lease is sent, not waited
                # for: until it lands our node carries no lease and cannot be judged expired.
                return self._claim_later(key, mine, ms)
            listed = None
            if mine is None:
                queueing = waiter is not None
                mine, listed = yield from self.tree.create(key, oid, ms, queueing=queueing)
                self._nodes[(key, owner)] = mine
                if mine.first:
                    return Grant(True, mine.czxid)
            children = (yield from self.tree.children(key)) if listed is None else listed
            name = mine.path.rpartition("/")[2]
            if name not in children:
                self._nodes.pop((key, owner), None)  # deleted: expired, force-released
                continue
            ours = [c for c in children if node_owner(c) == oid]
            if ours[0] != name:
                # A create whose reply was lost left an older node of ours: keep the older
                # (its place in the queue), drop the newer, never leave one behind.
                yield from self.tree.delete(mine.path)
                self._nodes.pop((key, owner), None)
                older, _ = yield from self._find(key, owner)
                if older is not None:
                    self._nodes[(key, owner)] = older
                continue
            for extra in ours[1:]:
                yield from self.tree.delete(f"{parent}/{extra}")
            index = children.index(name)
            if index == 0:
                return Grant(True, mine.czxid) if mine.claimed else self._claim_later(key, mine, ms)
            # Only the head and the node ahead matter from here: the list (the whole queue)
            # is not kept while this caller waits for answers (a thousand waiters on a
            # loop would each keep one).
            ahead = children[index - 1]
            head = children[0]
            del children, listed, ours
            busy = yield from behind(
                self.tree, key, mine, waiter, head, ahead, index, self._session_timeout
            )
            if busy is not None:
                if waiter is None:
                    self._nodes.pop((key, owner), None)  # behind() dropped our node
                return busy
        return Grant(False)

    def _claim_later(self, key: str, mine: Mine, ms: int) -> Grant:
        """Hold the lock with a node known to be first, and answer at once; its claim is sent
        a moment later, or with the release if that comes first (see claims.py)."""
        mine.claimed = True
        mine.claim = UNSENT
        mine.lease_ms = ms
        mine.since = self.tree.server_now() / 1000.0
        self._claims.later(mine, claim_delay(ms))
        return Grant(True, mine.czxid)

    def release(self, key: str, owner: str) -> bool:
        return self.session.run(self.releasing(key, owner))

    def releasing(self, key: str, owner: str) -> Steps[bool]:
        """:meth:`release`'s requests and decisions."""
        try:
            return (yield from self._release(key, owner))
        except BackendUnavailable:
            # The node may outlive this outage (the session can survive it): delete it as
            # soon as the connection is back, or it would block the key until its lease ends.
            self.tree.orphan(key, owner_id(owner))
            raise

    def _release(self, key: str, owner: str) -> Steps[bool]:
        known = self._nodes.get((key, owner))
        mine = self._mine(key, owner)
        if known is not None and mine is None:
            return False  # our node ended with its session: nothing to ask the server
        if mine is None:
            mine, _ = yield from self._find(key, owner)
        if mine is None:
            return False
        self._nodes.take((key, owner))
        with self._claims.lock:
            unsent = mine.claim is UNSENT
            if unsent:
                mine.claim = None
        try:
            if unsent:
                # Released before its claim was sent: claim and delete in one write, so the
                # waiter behind, which may not know we held the lock, learns it from the claim.
                data = NodeData.here(mine.lease_ms).encode()
                done = yield from self.tree.claim_and_delete(mine.path, data)
            else:
                done = yield from self.tree.delete(mine.path)
        except BaseException:
            self._nodes.left(key, owner, self.session.generation)
            raise
        self._let_go(key, owner)
        self._claims.settle(key, mine)  # answered before the delete: a failed claim means no node
        return done and mine.claimed

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        return self.adopt(key, owner, ttl).acquired

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        return self.session.run(self.adopting(key, owner, ttl))

    def adopting(self, key: str, owner: str, ttl: float) -> Steps[Grant]:
        """:meth:`adopt`'s (and :meth:`extend`'s) requests and decisions."""
        from kazoo.exceptions import NoNodeError

        mine = self._mine(key, owner)
        if mine is None:
            mine, children = yield from self._find(key, owner)
            if mine is None or not mine.claimed or not children:
                return Grant(False)
            if children[0] != mine.path.rpartition("/")[2]:
                return Grant(False)
        data = NodeData.here(max(1, int(ttl * 1000)), since=mine.since or None).encode()
        path = mine.path
        with self._claims.lock:
            if mine.claim is UNSENT:
                mine.claim = None  # this renewal is the claim
        try:
            stat = yield from self.tree.call(f"extend {key!r}", lambda c: c.set_async(path, data))
        except NoNodeError:
            self._nodes.pop((key, owner), None)
            return Grant(False)
        self._claims.settle(key, mine)  # answered before this one
        self.tree.saw(stat)
        mine.version = stat.version
        self._nodes[(key, owner)] = mine
        return Grant(True, mine.czxid)

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        return ZooKeeperWaiter(self, key, owner)

    def queue_first(self) -> bool:
        return True  # a free key is still taken in one round trip by a queued caller

    def aio(self) -> AsyncOps:
        """The same plans of requests, each sent with kazoo's ``*_async`` methods and awaited
        through a future of the loop: no thread per request or waiter (one set of operations
        per loop, made on first use)."""
        return self._aio.get(lambda: ZooKeeperOps(self))

    def leave(self, key: str, owner: str, *, reachable: bool) -> Steps[None]:
        """Drop ``owner``'s queue node on ``key`` (the waiter gave up)."""
        mine = self._nodes.take((key, owner))
        if mine is None or not reachable:
            self._nodes.left(key, owner, self.session.generation)
            if mine is not None:
                self.tree.orphan(key, owner_id(owner))
            return
        try:
            yield from self.tree.delete(mine.path)
        except BaseException:
            self._nodes.left(key, owner, self.session.generation)
            raise
        self._let_go(key, owner)

    @property
    def session_timeout(self) -> float:
        """The session timeout the ensemble granted (what a crashed holder costs others)."""
        return self._session_timeout

    @property
    def place_wakeups(self) -> int:
        """Watch notices delivered so far to this backend's waiters for places (what releases
        of read-write locks and semaphores cost the waiting processes)."""
        return self._shared.wakeups

    def try_acquire_shared(self, key: str, owner: str, mode: str, limit: int, ttl: float) -> Grant:
        return self._shared.try_acquire(key, owner, mode, limit, ttl)

    def release_shared(self, key: str, owner: str, mode: str) -> bool:
        return self._shared.release(key, owner, mode)

    def extend_shared(self, key: str, owner: str, mode: str, ttl: float) -> bool:
        return self._shared.adopt(key, owner, ttl).acquired

    def adopt_shared(self, key: str, owner: str, mode: str, ttl: float) -> Grant:
        return self._shared.adopt(key, owner, ttl)

    def shared_waiter(self, key: str, owner: str, mode: str, limit: int) -> Waiter:
        return self._shared.waiter(key, owner, mode)

    def shared_holders(self, key: str, mode: str, limit: int) -> list[Lease]:
        return self._shared.holders(key, mode, limit)

    def track(self, hold: Hold) -> None:
        self.session.track(hold)

    # -- admin --------------------------------------------------------------------------------

    def list(self, prefix: str) -> list[Lease]:
        return list_leases(self.session, self.tree, prefix)

    def info(self, key: str) -> Lease | None:
        return read_lease(self.session, self.tree, key)

    def force_release(self, key: str) -> bool:
        return force_release(self.session, self.tree, key)

    # -- lifecycle ----------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        self.session.forget_after_fork()
        self._shared.forget_after_fork()
        self.tree.forget_after_fork()
        self._claims.forget_after_fork()
        self.sender = Sender()
        self._aio = PerLoop()
        self._nodes = Nodes()
        self._queued = {}

    def close(self) -> None:
        self.session.close()
