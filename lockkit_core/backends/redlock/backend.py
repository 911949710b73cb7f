"""``RedlockBackend``: the Redlock algorithm over the redis backend's script, one per node."""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ...errors import BackendUnavailable, ConfigError, NotSupported
from ...url import LockURL, parse_url
from ..base import Backend, Capability, Grade, Grant, Lease, Waiter
from ..redis import RedisBackend
from ..redis.scripts import stored_key, stored_keys
from .fanout import Fanout, Reply
from .quorum import Tally, quorum
from .waiter import RedlockWaiter

__all__ = ["RedlockBackend"]

#: how long one node may take to answer one request, unless the ``node_timeout`` option says
NODE_TIMEOUT = 0.1
#: the socket timeout of each node's own requests: admin reads (``locked()``, ``lockkit
#: list``, which ask the nodes one after another), leaving queues in the background
SOCKET_TIMEOUT = 0.5
MIN_NODES = 3
#: a node that failed to answer is not chosen as a key's home node for this long (seconds)
DOWN_FOR = 1.0


class RedlockBackend(Backend):
    """``redlock://h1:6379,h2:6379,h3:6379/0``: a lock held on a majority of independent
    Redis masters (see the package docstring)."""

    schemes: ClassVar[tuple[str, ...]] = ("redlock",)
    extra: ClassVar[str | None] = "redis"
    requires: ClassVar[str | None] = "redis"
    # No FENCING: a majority of nodes cannot number grants in one increasing sequence.
    # No FAIR: each node queues in its own arrival order, and those orders may differ.
    capabilities: ClassVar[Capability] = (
        Capability.TTL
        | Capability.NOTIFY
        | Capability.CROSS_PROCESS
        | Capability.CROSS_HOST
        | Capability.LIST
        | Capability.HAND_OFF
    )
    grade: ClassVar[Grade] = Grade.QUORUM
    option_types: ClassVar[Mapping[str, type]] = {
        "node_timeout": float,
        "socket_timeout": float,
        "socket_connect_timeout": float,
        "password": str,
        "username": str,
        "db": int,
        "max_connections": int,
        "client_name": str,
    }

    @classmethod
    def url_options(cls, url: LockURL) -> dict[str, Any]:
        """The user and password, and the ``/db`` of the path."""
        found = super().url_options(url)
        db = url.path.strip("/")
        if db:
            found["db"] = db
        return found

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.check_seconds("node_timeout", "socket_timeout", "socket_connect_timeout")
        self.addresses = _addresses(url)
        node_timeout = self.options.get("node_timeout", NODE_TIMEOUT)
        node_options = {k: v for k, v in self.options.items() if k != "node_timeout"}
        node_options.setdefault("socket_timeout", SOCKET_TIMEOUT)
        node_options.setdefault("socket_connect_timeout", node_timeout)
        db = node_options.pop("db", 0)
        #: one redis:// backend per node: its script, its listener and its leaver
        self.nodes = [
            RedisBackend(parse_url(f"redis://{address}/{db}"), node_options)
            for address in self.addresses
        ]
        self.quorum = quorum(len(self.nodes))
        self._fanout = Fanout(self.nodes, node_timeout)
        self._waiters: dict[tuple[str, str], RedlockWaiter] = {}
        #: (monotonic) until when each node counts as down for choosing a home node
        self._down_until = [0.0] * len(self.nodes)

    # -- one round on every node ----------------------------------------------------------------

    def _tally(self, replies: Sequence[Reply], yes: Sequence[bool], pttl: Sequence[int]) -> Tally:
        busy = [
            ms
            for reply, said_yes, ms in zip(replies, yes, pttl, strict=True)
            if reply.error is None and not said_yes
        ]
        failed = sum(reply.error is not None for reply in replies)
        return Tally(len(replies), sum(yes), busy, failed)

    def _no_quorum(self, what: str, replies: Sequence[Reply]) -> BackendUnavailable:
        errors = "; ".join(str(reply.error) for reply in replies if reply.error is not None)
        answered = sum(reply.error is None for reply in replies)
        return BackendUnavailable(
            f"redlock at {self.describe()} cannot {what}: {answered} of {len(replies)} nodes "
            f"answered and {self.quorum} must ({errors})"
        )

    # -- locking ----------------------------------------------------------------------------------

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        if math.isinf(ttl):
            raise NotSupported("the redlock:// backend has no locks without a lease")
        what = f"acquire {key!r}"
        # The caller counts the lease from before this call (acquire.plan): validity is
        # ttl - elapsed - drift on the monotonic clock from before the first request.
        sent = time.monotonic()
        args = [node.acquire_args(key, owner, ttl) for node in self.nodes]
        replies = self._fanout.call(what, 5, args)
        grants = [
            None
            if reply.error is not None
            else node.acquire_answer(key, owner, ttl, reply.value, sent)
            for node, reply in zip(self.nodes, replies, strict=True)
        ]
        yes = [grant is not None and grant.acquired for grant in grants]
        for i, reply in enumerate(replies):
            if reply.error is not None:
                self._down_until[i] = sent + DOWN_FOR
        waiter = self._waiters.get((key, owner))
        if waiter is not None:
            waiter.held = yes
            if replies[waiter.home].error is not None:
                waiter.home_failed()
        pttl = [
            -1 if g is None or g.retry_after is None else int(g.retry_after * 1000) for g in grants
        ]
        tally = self._tally(replies, yes, pttl)
        if tally.won:
            # (a grant that took longer than its validity is given back by the caller)
            return Grant(True, None)
        # Lost: give back every node that may have granted, those whose answer is missing
        # too (the request may have arrived); the ones that said busy hold nothing of ours.
        # A queued caller keeps its home node's lock, handed to it in its turn: it is its
        # place in the line, not a majority, and it asks again after a short random pause
        # (a contender that took the other nodes past the line gives them back).
        keep = waiter.home if waiter is not None and yes[waiter.home] else None
        back = [
            node.release_args(key, owner)
            if (said_yes or reply.error is not None) and i != keep
            else None
            for i, (node, reply, said_yes) in enumerate(zip(self.nodes, replies, yes, strict=True))
        ]
        if any(part is not None for part in back):
            self._fanout.call(f"give back {key!r}", 4, back)
        if waiter is not None:
            waiter.held = [i == keep for i in range(len(self.nodes))]
        if tally.unreachable:
            raise self._no_quorum(what, replies)
        return Grant(False, retry_after=tally.retry_after())

    def release(self, key: str, owner: str) -> bool:
        return self._count(f"release {key!r}", 4, [n.release_args(key, owner) for n in self.nodes])

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        # only with a quorum: the watchdog counts the new lease from before this call
        args = RedisBackend.on_record_args("extend", key, owner, ttl)
        return self._count(f"extend {key!r}", 1, [args] * len(self.nodes))

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        if math.isinf(ttl):
            raise NotSupported("the redlock:// backend has no locks without a lease")
        args = RedisBackend.on_record_args("adopt", key, owner, ttl)
        replies = self._fanout.call(f"adopt {key!r}", 1, [args] * len(self.nodes))
        yes = [r.error is None and int(r.value[0]) == 1 for r in replies]
        return Grant(True, None) if self._decide(f"adopt {key!r}", replies, yes) else Grant(False)

    def _count(self, what: str, numkeys: int, args: list[list[Any]]) -> bool:
        replies = self._fanout.call(what, numkeys, args)
        yes = [r.error is None and int(r.value) == 1 for r in replies]
        return self._decide(what, replies, yes)

    def _decide(self, what: str, replies: Sequence[Reply], yes: Sequence[bool]) -> bool:
        """True with a quorum of yes; False when a quorum said no; BackendUnavailable when
        the nodes that failed could have decided either way."""
        tally = self._tally(replies, yes, [-1] * len(replies))
        if tally.undecided:
            raise self._no_quorum(what, replies)
        return tally.won

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        waiter = RedlockWaiter(self, key, owner)
        self._waiters[(key, owner)] = waiter
        return waiter

    def home_of(self, key: str) -> int:
        """The node whose queue the waiters for ``key`` join: the key's hash picks one, the
        same in every process; a node that failed in the last :data:`DOWN_FOR` seconds is
        passed over for the next."""
        first = zlib.crc32(key.encode("utf-8", "surrogatepass")) % len(self.nodes)
        now = time.monotonic()
        for step in range(len(self.nodes)):
            i = (first + step) % len(self.nodes)
            if self._down_until[i] <= now:
                return i
        return first

    def forget(self, waiter: RedlockWaiter) -> None:
        """``waiter`` is closed: attempts for its owner no longer report to it."""
        if self._waiters.get((waiter.key, waiter.owner)) is waiter:
            del self._waiters[(waiter.key, waiter.owner)]

    def queue_first(self) -> bool:
        return all(node.queue_first() for node in self.nodes)

    # -- admin: what a quorum of nodes agrees on ---------------------------------------------

    def _gather(self, what: str, read: Any) -> list[list[Lease]]:
        found: list[list[Lease]] = []
        errors: list[Reply] = []
        for node in self.nodes:
            try:
                found.append(read(node))
            except BackendUnavailable as exc:
                errors.append(Reply(error=exc))
        if len(found) < self.quorum:
            raise self._no_quorum(what, [*errors, *(Reply() for _ in found)])
        return found

    def _agreed(self, per_node: list[list[Lease]]) -> list[Lease]:
        """The leases a quorum of nodes hold for the same owner: the shortest remaining ttl,
        and the earliest start a node saw."""
        votes: dict[tuple[str, str], list[Lease]] = {}
        for leases in per_node:
            for one in leases:
                votes.setdefault((one.key, one.owner_hint), []).append(one)
        agreed = []
        for (key, hint), leases in votes.items():
            if len(leases) >= self.quorum:
                left = [one.ttl_remaining for one in leases if one.ttl_remaining is not None]
                # the earliest start a node saw: each node's clock stamps its own copy
                began = [one.started for one in leases if one.started is not None]
                agreed.append(
                    Lease(key, hint, None, min(left) if left else None, leases[0].holder,
                          started=min(began) if began else None)
                )  # fmt: skip
        return sorted(agreed, key=lambda one: one.key)

    def list(self, prefix: str) -> list[Lease]:
        return self._agreed(self._gather("list locks", lambda node: node.list(prefix)))

    def info(self, key: str) -> Lease | None:
        def read(node: RedisBackend) -> list[Lease]:
            one = node.info(key)
            return [] if one is None else [one]

        agreed = self._agreed(self._gather(f"read {key!r}", read))
        return agreed[0] if agreed else None

    def force_release(self, key: str) -> bool:
        args = [*stored_keys(stored_key(key)), "force", 0]
        replies = self._fanout.call(f"force-release {key!r}", 4, [args] * len(self.nodes))
        if sum(r.error is None for r in replies) < self.quorum:
            raise self._no_quorum(f"force-release {key!r}", replies)
        return any(r.error is None and int(r.value) == 1 for r in replies)

    # -- lifecycle ------------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        for node in self.nodes:
            node.after_fork_in_child()

    def close(self) -> None:
        for node in self.nodes:
            node.close()


def _addresses(url: LockURL) -> list[str]:
    """``host:port`` of each node of ``url``; at least three, each once."""
    hosts = url.host.split(",") if url.host else []
    if url.port is not None and len(hosts) == 1:
        hosts = [f"{hosts[0]}:{url.port}"]
    addresses: list[str] = []
    for host in hosts:
        name, _, port = host.strip().rpartition(":") if ":" in host else (host.strip(), "", "6379")
        if not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"bad redlock node {host!r} in {url.redacted()}: write each node as host:port, "
                "comma-separated, e.g. redlock://h1:6379,h2:6379,h3:6379/0"
            )
        address = f"{name.lower()}:{int(port)}"
        if address in addresses:
            raise ConfigError(
                f"redlock node {address} is named twice in {url.redacted()}: each node must be "
                "a separate, independent Redis master, or one failure counts as two"
            )
        addresses.append(address)
    if len(addresses) < MIN_NODES:
        raise ConfigError(
            f"redlock needs at least {MIN_NODES} independent Redis masters, {url.redacted()} "
            f"names {len(addresses)}; list them as redlock://h1:6379,h2:6379,h3:6379/0 "
            "(for one server use redis://)"
        )
    return addresses
