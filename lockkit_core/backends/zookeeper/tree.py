"""``LockTree``: the lock nodes of one backend on the server: paths, creates (whose lost
replies are swept), reads and deletes, and the server's clock as our writes saw it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import BackendError, BackendUnavailable
from .nodes import NodeData, key_node, node_owner, ordered
from .session import Request, Session, Steps

__all__ = ["LockTree", "Mine", "Nodes", "op"]

#: attempts before giving up on a key whose parent keeps vanishing under our creates
_ROUNDS = 8
#: keys remembered as recently contended (their parent exists: create without the transaction)
_CROWDED = 256


def op(method: str, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """``client.<method>(*args, **kwargs)``, to be sent through ``Session.call``."""
    return lambda client: getattr(client, method)(*args, **kwargs)


@dataclass
class Mine:
    """Our node for one (key, owner): its path, fencing token, version, and whether it has
    claimed the lock (a lease in its data) or only queues."""

    path: str
    czxid: int
    version: int
    claimed: bool
    generation: int
    first: bool = False  #: made with the key's parent: nobody can be ahead of it
    #: the claim's reply while it has not been read (kazoo's async result), or UNSENT
    claim: Any = None
    lease_ms: int = 0  #: the lease the claim stamps
    since: float = 0.0  #: when it claimed (epoch s, the server's clock as seen); 0: not yet


class Nodes:
    """Our nodes by (key, owner), and by key the owners of this process whose node is on it
    or being deleted: the last of them to see its delete answered removes the key's parent
    if it is empty (see ``ZooKeeperBackend._let_go``). Callers on several threads and loops
    change it at once, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, dict[str, Mine]] = {}
        self._leaving: dict[str, set[str]] = {}

    def get(self, at: tuple[str, str]) -> Mine | None:
        return self._by_key.get(at[0], {}).get(at[1])

    def __setitem__(self, at: tuple[str, str], mine: Mine) -> None:
        with self._lock:
            self._by_key.setdefault(at[0], {})[at[1]] = mine

    def pop(self, at: tuple[str, str], default: None = None) -> Mine | None:
        with self._lock:
            return self._pop(at)

    def _pop(self, at: tuple[str, str]) -> Mine | None:
        owners = self._by_key.get(at[0])
        if owners is None:
            return None
        mine = owners.pop(at[1], None)
        if not owners:
            del self._by_key[at[0]]
        return mine

    def take(self, at: tuple[str, str]) -> Mine | None:
        """:meth:`pop` a node about to be deleted; :meth:`left` must follow."""
        with self._lock:
            self._leaving.setdefault(at[0], set()).add(at[1])
            return self._pop(at)

    def left(self, key: str, owner: str, generation: int) -> bool:
        """``owner``'s delete on ``key`` was answered (or failed): True if no other node of
        this process is on the key or being deleted (nodes of a session other than
        ``generation`` are gone from the server and do not count)."""
        with self._lock:
            leaving = self._leaving.get(key, set())
            leaving.discard(owner)
            if not leaving:
                self._leaving.pop(key, None)
            if leaving:
                return False
            return not any(
                other != owner and mine.generation == generation
                for other, mine in self._by_key.get(key, {}).items()
            )

    def values(self) -> list[Mine]:
        with self._lock:
            return [mine for owners in self._by_key.values() for mine in owners.values()]


class LockTree:
    """``<chroot>/lockkit/locks``: one parent per key, one child per contender."""

    def __init__(self, session: Session, root: str) -> None:
        self.session = session
        self.root = root
        self._root_made = False
        self._crowded: dict[str, None] = {}
        #: keys whose parent a transaction of ours is making now (how many)
        self._opening: dict[str, int] = {}
        #: (key, owner id) whose node may be left behind (a lost reply, a waiter that left
        #: during an outage): deleted when the connection is back
        self._orphans: set[tuple[str, str]] = set()
        self._orphans_lock = threading.Lock()
        # The server's clock as of our last write (ms), and our monotonic time on its reply:
        # server time now is at least their sum, so a lease is never judged over too early.
        self._server_ms = 0.0
        self._server_at = 0.0

    def parent(self, key: str) -> str:
        """The path of ``key``'s parent node."""
        return f"{self.root}/{key_node(key)}"

    def call(self, what: str, start: Any) -> Steps[Any]:
        """One request through the session (the locks root is made before the first)."""
        yield from self._make_root()
        return (yield Request(what, (start,)))

    def call_all(self, what: str, *starts: Any) -> Steps[list[Any]]:
        """Several requests sent at once (see ``Session.call_all``)."""
        yield from self._make_root()
        answers: list[Any] = yield Request(what, starts, many=True)
        return answers

    def _make_root(self) -> Steps[None]:
        if not self._root_made:
            yield Request("create the locks root", (lambda c: c.ensure_path_async(self.root),))
            self._root_made = True

    def saw(self, stat: Any) -> None:
        """Note the server time of a write we made (its ``mtime``)."""
        self._server_ms, self._server_at = float(stat.mtime), time.monotonic()

    def server_now(self) -> float:
        """The server's clock now (ms), never ahead of it: our last write's ``mtime`` plus
        the time since its reply came."""
        if not self._server_at:
            return time.time() * 1000.0  # no write yet: our clock (admin display only)
        return self._server_ms + (time.monotonic() - self._server_at) * 1000.0

    def create(
        self, key: str, oid: str, ms: int, queueing: bool
    ) -> Steps[tuple[Mine, list[str] | None]]:
        """Make our node for ``oid``; with the key's parent in the same transaction when the
        key is free (one round trip, and we are first: the node claims the lock at once).
        On a key contended lately, the contenders are listed in the same round trip (the
        server answers a session's requests in order, so the list has our node): they come
        back too, else None."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        parent = self.parent(key)
        prefix = f"{parent}/{oid}-"
        generation = self.session.generation
        now = self.server_now() / 1000.0
        claim = NodeData.here(ms, since=now).encode()
        data = NodeData.here(0, wants_ms=ms, since=now).encode() if queueing else claim
        since = 0.0 if queueing else now
        for _ in range(_ROUNDS):
            if key in self._crowded or self._opening.get(key):
                # Contended lately, or another caller here is making the parent (its request
                # is ahead of ours in the session): skip the transaction. A NoNodeError
                # sends us round again.
                made, listed = yield from self.creating_all(
                    key,
                    oid,
                    op(
                        "create_async",
                        prefix,
                        data,
                        ephemeral=True,
                        sequence=True,
                        include_data=True,
                    ),
                    op("get_children_async", parent),
                )
                if isinstance(made, NoNodeError):
                    self._crowded.pop(key, None)
                    continue
                path, stat = made
                self.saw(stat)
                children = None if isinstance(listed, Exception) else ordered(list(listed))
                return Mine(
                    path, stat.czxid, stat.version, not queueing, generation, since=since
                ), children

            def multi(c: Any) -> Any:
                t = c.transaction()  # which, unlike create(), ignores the default ACL
                t.create(parent, b"", acl=c.default_acl)
                t.create(prefix, claim, acl=c.default_acl, ephemeral=True, sequence=True)
                t.set_data(prefix + "0" * 10, claim)  # a fresh parent numbers from 0
                return t.commit_async()

            self._opening[key] = self._opening.get(key, 0) + 1
            try:
                results = yield from self.creating(key, oid, multi)
            finally:
                left = self._opening.pop(key, 1) - 1
                if left:
                    self._opening[key] = left
            if not isinstance(results[0], Exception):
                stat = results[2]
                self.saw(stat)
                return Mine(
                    results[1], stat.czxid, stat.version, True, generation, first=True, since=now
                ), None
            if isinstance(results[0], NodeExistsError):
                self._crowded[key] = None
                if len(self._crowded) > _CROWDED:
                    del self._crowded[next(iter(self._crowded))]
            else:
                failed = results[0]
                error = self.session.translate(f"create the lock node of {key!r}", failed)
                if error is failed:
                    error = BackendError(f"creating the lock node of {key!r} failed: {failed!r}")
                raise error from failed
            made, listed = yield from self.creating_all(
                key,
                oid,
                op("create_async", prefix, data, ephemeral=True, sequence=True, include_data=True),
                op("get_children_async", parent),
            )
            if isinstance(made, NoNodeError):
                continue  # the empty parent was just removed: make it again
            path, stat = made
            self.saw(stat)
            children = None if isinstance(listed, Exception) else ordered(list(listed))
            return Mine(
                path, stat.czxid, stat.version, not queueing, generation, since=since
            ), children
        raise BackendUnavailable(f"the lock node of {key!r} kept vanishing while created")

    def creating(self, key: str, oid: str, start: Any) -> Steps[Any]:
        """Send a create; if its answer is lost, the node may exist all the same: leave its
        owner id for the sweep that runs when the connection is back."""
        try:
            return (yield from self.call(f"create the lock node of {key!r}", start))
        except BackendUnavailable:
            self.orphan(key, oid)
            raise

    def creating_all(self, key: str, oid: str, *starts: Any) -> Steps[list[Any]]:
        """:meth:`creating` with further requests sent in the same round trip (the create
        first); a refusal comes back as its exception, NoNodeError for the create."""
        from kazoo.exceptions import NoNodeError

        try:
            answers = yield from self.call_all(f"create the lock node of {key!r}", *starts)
        except BackendUnavailable:
            self.orphan(key, oid)
            raise
        if isinstance(answers[0], Exception) and not isinstance(answers[0], NoNodeError):
            raise BackendError(f"creating the lock node of {key!r} failed: {answers[0]!r}")
        return answers

    def children(self, key: str) -> Steps[list[str]]:
        """The contenders of ``key`` in queue order; ``[]`` for a free key."""
        from kazoo.exceptions import NoNodeError

        try:
            found = yield from self.call(
                f"list the contenders of {key!r}",
                lambda c: c.get_children_async(self.parent(key)),
            )
        except NoNodeError:
            return []
        return ordered(list(found))

    def drop_parent(self, key: str) -> None:
        """Remove the key's parent if it is empty (a free key costs nothing); not waited for:
        the server refuses it if anyone queued meanwhile.

        Called after our node's delete. On a key contended lately the parent is most likely
        still in use, and a refused delete is a write (logged by the server like any other),
        so its children are counted first (a read of its stat, not a list of a long queue)
        and the parent deleted only if none is left. Whoever deletes the last node reads
        after that delete and finds it empty."""
        client = self.session._client
        if client is None or not client.connected:
            return
        parent = self.parent(key)
        if key not in self._crowded:
            client.delete_async(parent)
            return

        def counted(result: Any) -> None:
            try:
                stat = result.get()
                if stat is not None and not stat.numChildren:
                    client.delete_async(parent)
            except Exception:  # gone already, or the connection: nothing to do
                return

        client.exists_async(parent).rawlink(counted)

    def delete(self, path: str, version: int = -1) -> Steps[bool]:
        """Delete ``path`` (if still at ``version``); False if it was gone or had changed."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        try:
            yield from self.call(f"delete {path}", lambda c: c.delete_async(path, version))
        except (NoNodeError, BadVersionError):
            return False
        return True

    def claim_and_delete(self, path: str, data: bytes) -> Steps[bool]:
        """Stamp ``path`` with ``data`` and delete it in one transaction (its watchers see the
        change, then the deletion); False if it was gone."""

        def multi(c: Any) -> Any:
            t = c.transaction()
            t.set_data(path, data)
            t.delete(path)
            return t.commit_async()

        results = yield from self.call(f"delete {path}", multi)
        return not isinstance(results[0], Exception)

    # -- nodes left behind ----------------------------------------------------------------------

    def orphan(self, key: str, oid: str) -> None:
        """Remember that ``oid`` may have left a node on ``key`` that nobody will release."""
        with self._orphans_lock:
            self._orphans.add((key, oid))

    def has_orphans(self) -> bool:
        """True while some node may be left behind (see :meth:`sweep`)."""
        return bool(self._orphans)

    def sweep(self, held: set[str]) -> Steps[None]:
        """Delete nodes a lost reply or an outage may have left under our owner ids (but not
        the ``held`` paths)."""
        with self._orphans_lock:
            pending, self._orphans = self._orphans, set()
        for key, oid in pending:
            try:
                for child in (yield from self.children(key)):
                    path = f"{self.parent(key)}/{child}"
                    if node_owner(child) == oid and path not in held:
                        yield from self.delete(path)
                self.drop_parent(key)
            except BackendError:
                self.orphan(key, oid)

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's leftovers are the parent's to sweep."""
        self._orphans = set()
        self._orphans_lock = threading.Lock()
