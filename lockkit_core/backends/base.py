"""The contract a backend implements: ``Backend``, ``Capability``, ``Grade``, ``Grant``, ``Lease``.

A backend is a thin, stateless-looking adapter over one store. It knows nothing of threads,
reentrancy or renewal (``lockkit_core.lock`` does that); it offers atomic compare-and-act
operations on ``(key, owner)`` pairs, where ``key`` is already namespaced and ``owner`` is a
128-bit secret token, and a way to wait until a key may have become free (the ``Waiter`` protocol,
:mod:`~lockkit_core.backends.waiter`). Read-write locks and semaphores are the shared places of
:mod:`~lockkit_core.backends.shared_ops`, which ``Backend`` inherits.
"""

from __future__ import annotations

import enum
import hashlib
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from ..errors import ConfigError, NotSupported
from ..redact import HIDDEN, is_secret
from ..url import LockURL
from .shared_ops import SharedOps
from .waiter import SleepWaiter, Waiter

if TYPE_CHECKING:
    from .aio import AsyncOps

__all__ = [
    "Backend",
    "Capability",
    "Grade",
    "Grant",
    "Lease",
    "SleepWaiter",
    "Waiter",
    "capability_names",
    "owner_hint",
    "owner_id",
]


class Capability(enum.Flag):
    """What a backend can honour; checked at ``kit.lock()``, never discovered in production."""

    NONE = 0
    TTL = enum.auto()  #: leases expire on the server when the holder stops renewing
    FENCING = enum.auto()  #: every grant carries a strictly increasing integer token
    FAIR = enum.auto()  #: ``fair=True`` gives FIFO order among waiters
    NOTIFY = enum.auto()  #: waiters are woken by the store on release, not by polling
    CROSS_PROCESS = enum.auto()  #: excludes other processes on the same host
    CROSS_HOST = enum.auto()  #: excludes processes on other hosts
    LIST = enum.auto()  #: the admin layer can list held locks
    #: a lease outlives the process (and session) that took it, so its owner token can be
    #: handed to another process (``Lock.hand_off``, Celery's enqueue locks)
    HAND_OFF = enum.auto()
    #: read-write locks and counting semaphores (``kit.rwlock()``, ``kit.semaphore()``)
    SHARED = enum.auto()
    #: ``kit.lock(key, ttl=None)``: held with no lease until released, because the store
    #: itself frees a lock whose holder process has ended (memory, file). A store that only
    #: frees by expiry would keep a crashed holder's lock for ever, so it refuses ``ttl=None``.
    NO_LEASE = enum.auto()


def capability_names(flags: Capability) -> list[str]:
    """``["ttl", "fencing", ...]`` for the flags set in ``flags``, in declaration order."""
    return [flag.name.lower() for flag in Capability if flag.name and flag and flag in flags]


def owner_id(owner: str) -> str:
    """What a store keeps of an owner token: its SHA-1 in 40 hex digits, never the token, so
    reading the store does not let anyone release or extend. SHA-1 because Redis's scripts
    can compute nothing else; a 128-bit random token has no preimage within reach."""
    return hashlib.sha1(owner.encode("utf-8", "surrogatepass")).hexdigest()  # noqa: S324


def owner_hint(owner: str) -> str:
    """The first 8 hex digits of :func:`owner_id`: what ``admin`` shows of an owner."""
    return owner_id(owner)[:8]


class Grade(str, enum.Enum):
    """How far the backend's exclusion can be trusted when machines fail.

    ``str(grade)`` and ``format(grade)`` are its value, as with Python 3.11's ``StrEnum``
    (not used: lockkit runs on Python 3.10)."""

    CONSENSUS = "consensus"
    SINGLE_NODE = "single-node"
    QUORUM = "quorum"
    REPLICATED_ASYNC = "replicated-async"
    PROCESS = "in-process"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Grant(NamedTuple):
    """The answer to one acquisition attempt.

    ``token`` is the fencing token when ``acquired`` (None if the backend has none);
    ``retry_after`` is the holder's remaining lease in seconds when busy (None: unknown);
    ``since`` (monotonic) is set on a grant handed to a waiter: the lease began after it.
    (A named tuple, not a frozen dataclass: one is made per attempt, at a quarter the cost.)
    """

    acquired: bool
    token: int | None = None
    retry_after: float | None = None
    since: float | None = None


@dataclass(frozen=True)
class Lease:
    """What the admin layer shows about one held lock. ``key`` is the stored (namespaced) key;
    ``owner_hint`` is :func:`owner_hint` of the owner token, enough to tell holders apart but
    useless for releasing. ``started``: when the current holder got it, in seconds since the
    epoch, by the store's clock where it has one (None where a record made before the store
    kept it); ``waiters``: how many wait for it, where the store can count them cheaply."""

    key: str
    owner_hint: str
    token: int | None
    ttl_remaining: float | None
    holder: str | None = None
    started: float | None = None
    waiters: int | None = None


class Backend(SharedOps, ABC):
    """One store. Subclasses declare the class attributes and implement the abstract methods.

    Every method that talks to the store raises :class:`~lockkit_core.BackendUnavailable`
    when it cannot reach it, and never retries beyond one socket timeout on its own.
    """

    schemes: ClassVar[tuple[str, ...]] = ()
    #: the pip extra and importable module the backend needs, or None
    extra: ClassVar[str | None] = None
    requires: ClassVar[str | None] = None
    capabilities: ClassVar[Capability] = Capability.NONE
    grade: ClassVar[Grade] = Grade.SINGLE_NODE
    #: options accepted in the URL query string or ``OPTIONS``, with their parsers
    option_types: ClassVar[Mapping[str, type]] = {}

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        self.url = url
        self.options = self.parse_options(url, options)

    @classmethod
    def variant(cls, url: LockURL, options: Mapping[str, Any]) -> type[Backend]:
        """The class that serves ``url`` with ``options``: a store whose options pick another
        kind of lock with capabilities of its own (``postgresql://?mode=advisory``) returns
        that class; the rest return their own."""
        return cls

    @classmethod
    def variants(cls) -> dict[str, type[Backend]]:
        """The other classes :meth:`variant` may pick, by the URL query that picks them
        (shown by ``lockkit backends``)."""
        return {}

    def check_seconds(self, *names: str) -> None:
        """ConfigError for any of the options ``names`` given as anything but a positive number
        of seconds (a missing one is left to the backend's default)."""
        for name in names:
            if name in self.options and not self.options[name] > 0:
                raise ConfigError(f"option {name!r} must be a positive number of seconds")

    @classmethod
    def url_options(cls, url: LockURL) -> dict[str, Any]:
        """Options the URL carries outside its query string: the user and password of its
        ``user:password@`` part, for a backend that takes them. A backend whose URL path means
        an option (redis's ``/db``) adds it."""
        found: dict[str, Any] = {}
        if url.username is not None and "username" in cls.option_types:
            found["username"] = url.username
        if url.password is not None and "password" in cls.option_types:
            found["password"] = url.password
        return found

    @classmethod
    def parse_options(cls, url: LockURL, options: Mapping[str, Any]) -> dict[str, Any]:
        """Gather the options of the URL (its parts, then its query) and ``options``, and
        type-check them. Each option has one value: given in two places alike it is taken,
        given two different values it is a :class:`ConfigError` naming both, never a pick."""
        parsed: dict[str, Any] = {}
        given: dict[str, tuple[str, Any]] = {}  # name -> (where, raw value)
        places = (
            ("the URL", cls.url_options(url)),
            ("the URL query", url.query),
            ("OPTIONS", options),
        )
        for where, values in places:
            for name, raw in values.items():
                kind = cls.option_types.get(name)
                if kind is None:
                    known = ", ".join(sorted(cls.option_types)) or "(none)"
                    raise ConfigError(
                        f"unknown option {name!r} for the {url.scheme}:// backend; "
                        f"known options: {known}"
                    )
                value = _coerce(name, raw, kind)
                if name in parsed and parsed[name] != value:
                    first, first_raw = given[name]
                    raise ConfigError(
                        f"option {name!r} is {_shown(name, first_raw)} in {first} but "
                        f"{_shown(name, raw)} in {where} for {url.redacted()}: give it in one "
                        "place (or the same value in both)"
                    )
                parsed[name] = value
                given.setdefault(name, (where, raw))
        return parsed

    # -- locking -----------------------------------------------------------------------------

    @abstractmethod
    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        """Take ``key`` for ``owner`` for ``ttl`` seconds if it is free, in one atomic step.
        ``ttl`` is ``math.inf`` (no lease) only on a backend that declares ``NO_LEASE``.

        If ``owner`` already holds ``key`` (a retried request whose answer was lost), the
        lease is renewed and the current token returned.
        """

    @abstractmethod
    def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds it; False if it does not (expired or taken)."""

    @abstractmethod
    def extend(self, key: str, owner: str, ttl: float) -> bool:
        """Reset the lease of ``key`` to ``ttl`` seconds if ``owner`` holds it."""

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        """Take over ``owner``'s existing lease on ``key``: renew it to ``ttl`` seconds and
        return its current token. ``Grant(False)`` if ``owner`` does not hold ``key``; a free
        key is never taken (adoption never creates a holder).

        The default is one ``extend`` and cannot read the token (``token=None``); backends
        that keep tokens override it so the adopted token is returned in the same step.
        """
        if math.isinf(ttl):
            raise NotSupported(f"the {self.url.scheme}:// backend has no locks without a lease")
        if not self.extend(key, owner, ttl):
            return Grant(False)
        return Grant(True, None)

    # -- batches: several operations in one step (task deduplication's start and end) ----------

    def begin_run(
        self, run: str, run_owner: str, key: str, owner: str, ttl: float
    ) -> tuple[Grant, Grant]:
        """Take ``run`` for ``run_owner`` in one attempt (as :meth:`try_acquire`) and, only if
        that succeeded, adopt the lease ``owner`` holds on ``key`` (as :meth:`adopt`), both
        for ``ttl`` seconds. Returns both grants; the second is ``Grant(False)`` when ``run``
        was not taken (``key`` untouched) or ``owner`` no longer holds ``key``.

        The default makes the two calls in turn; a store that can do both in one atomic step
        (redis://: one script) overrides it, saving a round trip per task."""
        got = self.try_acquire(run, run_owner, ttl)
        if not got.acquired:
            return got, Grant(False)
        return got, self.adopt(key, owner, ttl)

    def end_run(
        self,
        releases: Sequence[tuple[str, str]],
        marker: tuple[str, str, float] | None = None,
        guard: tuple[str, str, float] | None = None,
    ) -> list[bool]:
        """Put ``marker`` (``(key, owner, ttl)``, taken as :meth:`try_acquire` does) if given,
        then release each ``(key, owner)`` in order. Returns, per release, whether ``owner``
        still held the key (False: its lease was lost, and nothing was freed).

        ``guard`` (``(key, owner, ttl)``: a task's run record) is released last, and the
        others only while its owner still holds it; if it does not, nothing is released and
        every answer (the guard's last) is False. A copy of the task that took the run record
        over adopted the same keys under the same owner token: they are its now.

        The default makes the calls in turn, the guard renewed first (so nobody can take it
        over before the releases are made); redis:// does it all in one atomic step."""
        if marker is not None:
            self.try_acquire(*marker)
        if guard is None:
            return [self.release(key, owner) for key, owner in releases]
        run, run_owner, ttl = guard
        if not self.extend(run, run_owner, ttl):
            return [False] * (len(releases) + 1)
        return [
            *(self.release(key, owner) for key, owner in releases),
            self.release(run, run_owner),
        ]

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        """Register to be woken when ``key`` may be free. Register *before* the attempt that
        precedes the wait, so that a release in between is not missed."""
        return SleepWaiter()

    def aio(self) -> AsyncOps:
        """This store's asyncio operations (``Lock.aacquire`` and friends) for the running
        event loop; :class:`NotSupported` on a store that has none."""
        raise NotSupported(
            f"the {self.url.scheme}:// backend has no asyncio API yet (aacquire, async with); "
            "use memory://, file://, redis://, zookeeper://, etcd://, postgresql://, "
            "mysql:// or sqlite://, or the blocking API outside the event loop"
        )

    def queue_first(self) -> bool:
        """True if a blocking caller should get its waiter before its first attempt (a store
        that queues waiters then needs no second attempt to queue it)."""
        return False

    def track(self, hold: Any) -> None:
        """Called with each new :class:`~lockkit_core.hold.Hold`; a store whose leases hang on
        a session (ZooKeeper) keeps it to tell the holder when that session is lost."""

    # -- admin -------------------------------------------------------------------------------

    @abstractmethod
    def list(self, prefix: str) -> list[Lease]:
        """Held locks whose stored key starts with ``prefix``, sorted by key."""

    @abstractmethod
    def info(self, key: str) -> Lease | None:
        """The lease on ``key``, or None if it is free."""

    @abstractmethod
    def force_release(self, key: str) -> bool:
        """Free ``key`` whoever holds it; False if it was free."""

    # -- lifecycle ---------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        """Drop state (connections, file handles, threads) that must not cross a fork."""

    def close(self) -> None:
        """Release client resources; the backend is unusable afterwards."""

    def describe(self) -> str:
        """The URL with secrets hidden."""
        return self.url.redacted()


def _coerce(name: str, value: Any, kind: type) -> Any:
    if isinstance(value, kind) and not (kind is not bool and isinstance(value, bool)):
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)  # OPTIONS = {"socket_timeout": 5}
    if not isinstance(value, str):
        raise ConfigError(f"option {name!r} must be {kind.__name__}, got {value!r}")
    try:
        if kind is bool:
            lowered = value.strip().lower()
            if lowered in {"1", "true", "yes", "on"}:
                return True
            if lowered in {"0", "false", "no", "off"}:
                return False
            raise ValueError(value)
        return kind(value)
    except ValueError:
        raise ConfigError(f"option {name!r} must be {kind.__name__}, got {value!r}") from None


def _shown(name: str, value: Any) -> str:
    """An option's value as an error message may show it: secrets hidden."""
    return repr(HIDDEN) if is_secret(name) else repr(value)
