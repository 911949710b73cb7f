"""``LockKit``: locks on one store under one namespace, and the handles it hands out."""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from . import process
from .admin import Admin
from .backends.base import Backend, Capability
from .config import UNSET, LockKitConfig, Seconds
from .errors import NotSupported
from .hold_table import Holds
from .keys import KeyTemplate, check_key
from .lock import Lock, OnLost
from .lock_options import check_owner, lock_options
from .observe import Labels
from .registry import create_backend
from .rwlock import RWLock
from .semaphore import Semaphore, check_limit
from .shared import SharedKit

__all__ = ["LockKit", "LockMaker"]

P = ParamSpec("P")
R = TypeVar("R")

_kits: weakref.WeakSet[LockKit] = weakref.WeakSet()


class LockMaker(Protocol):
    """What :meth:`LockKit.lock_maker` returns: ``make(key)``, or ``make(key, owner)`` to
    adopt an acquisition made elsewhere (as ``kit.lock(key, owner=...)``)."""

    def __call__(self, key: str, owner: str | None = None) -> Lock: ...


def _after_fork_in_child() -> None:
    for kit in list(_kits):
        kit._after_fork_in_child()


process.after_fork(_after_fork_in_child)


class LockKit:
    """Locks on one store under one namespace.

    ``LockKit("redis://127.0.0.1:6379/0", namespace="shop", ttl=30.0)``; with no URL it uses
    ``file://`` under the system temp dir. Explicit arguments win over ``config``.
    """

    def __init__(
        self,
        url: Any = UNSET,
        *,
        namespace: Any = UNSET,
        ttl: Seconds = UNSET,
        auto_renew: Any = UNSET,
        timeout: Seconds = UNSET,
        options: Any = UNSET,
        config: LockKitConfig | None = None,
    ) -> None:
        if isinstance(url, LockKitConfig):
            raise TypeError("pass a LockKitConfig as LockKit(config=...), not as the URL")
        base = config if config is not None else LockKitConfig()
        changes = {
            name: value
            for name, value in (
                ("url", url),
                ("namespace", namespace),
                ("ttl", ttl),
                ("auto_renew", auto_renew),
                ("timeout", timeout),
                ("options", options),
            )
            if value is not UNSET
        }
        self.config = base.replace(**changes) if changes else base
        self._start(create_backend(self.config.url, self.config.options))

    def _start(self, backend: Backend) -> None:
        self.namespace = self.config.namespace
        self.backend: Backend = backend
        #: the holds this kit's handles may re-enter: the one interface between the kit and
        #: its ``Lock`` handles, which use only it, ``backend`` and ``namespace``
        self.holds = Holds(self.backend)
        #: the attributes of this kit's metrics (lockkit_core.observe)
        self.labels = Labels(self.backend.url.scheme, self.namespace)
        # A kit dropped without close() still closes its store once collected. Nothing
        # long-lived refers to a kit: its handles do (so it lives while any of its locks can
        # be released), the watchdog refers only to holds and their backend.
        self._closer = weakref.finalize(self, self.backend.close)
        self.admin = Admin(self)
        self._shared: dict[tuple[str, int], SharedKit] = {}
        #: the options of a kit.lock() that gives none, checked once for the config they
        #: were made from (see lock())
        self._defaults: tuple[LockKitConfig, dict[str, Any]] | None = None
        _kits.add(self)

    @classmethod
    def from_config(cls, mapping: Mapping[str, Any] | None = None, **overrides: Any) -> LockKit:
        """Build from a settings mapping (``URL``, ``NAMESPACE``, ``TTL``, ...)."""
        return cls(config=LockKitConfig.from_mapping(mapping, **overrides))

    @classmethod
    def from_redis(
        cls,
        client: Any,
        *,
        namespace: Any = UNSET,
        ttl: Any = UNSET,
        auto_renew: Any = UNSET,
        timeout: Any = UNSET,
    ) -> LockKit:
        """Locks on a ``redis.Redis`` the app already built (a Django cache's connection, a
        ``Sentinel.master_for(...)`` client, a ``RedisCluster``): lock operations use its
        pool, giving each connection back after the call, so they count once against its
        ``max_connections``; the release listener and asyncio clients get pools of their own
        with the same connection settings. ``close()`` leaves the app's client open."""
        from .backends.redis import RedisBackend

        backend = RedisBackend.from_client(client)
        given = {"namespace": namespace, "ttl": ttl, "auto_renew": auto_renew, "timeout": timeout}
        changes = {name: value for name, value in given.items() if value is not UNSET}
        kit = cls.__new__(cls)
        try:
            kit.config = LockKitConfig(url=backend.url.raw).replace(**changes)
        except BaseException:
            backend.close()
            raise
        kit._start(backend)
        return kit

    def __repr__(self) -> str:
        return f"<LockKit {self.backend.describe()} namespace={self.namespace!r}>"

    def close(self) -> None:
        """Close the store's connections. Held locks stay held until their TTL."""
        # A closed kit has nothing to redo in a forked child: its descriptors are closed,
        # and their numbers may be another's by then.
        _kits.discard(self)
        self._closer()

    def __enter__(self) -> LockKit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- handles -----------------------------------------------------------------------------

    def lock(
        self,
        key: str,
        *,
        ttl: Seconds = UNSET,
        timeout: Seconds = UNSET,
        auto_renew: Any = UNSET,
        reentrant: bool = True,
        fair: bool = False,
        on_lost: OnLost | Iterable[OnLost] | None = None,
        owner: str | None = None,
        template: str | None = None,
    ) -> Lock:
        """A handle on ``key``. Arguments left out come from the kit's settings.

        ``timeout``: ``None`` or ``-1`` waits forever, ``0`` does not wait. ``reentrant=True``
        (the default) re-enters per thread like ``threading.RLock``; ``reentrant=False``
        belongs to its acquisition like ``threading.Lock``, so another thread (an event
        loop after ``asyncio.to_thread``) may release it.

        ``owner`` adopts an acquisition made elsewhere (another process), given its owner
        token: ``release()`` and ``extend()`` act on that lease directly, and ``acquire()``
        (or ``with``) confirms on the store that the token still holds the key and then
        renews, checks and releases it here. Adoption never creates a holder: on a free key,
        or one held under another token, ``acquire()`` raises :class:`LockNotOwned` at once.

        ``template``: what the key was made from (``"order:{order_id}"``, a task's name),
        shown on the lock's metrics as ``lockkit.key_template``; the full key never is
        (see :mod:`lockkit_core.observe`).
        """
        check_key(key)
        if (
            ttl is UNSET
            and timeout is UNSET
            and auto_renew is UNSET
            and fair is False
            and on_lost is None
            and owner is None
        ):
            options = self._default_options()
        else:
            options = lock_options(self, ttl, timeout, auto_renew, fair, on_lost, owner)
        if template is not None:
            options = {**options, "labels": self._template_labels(template)}
        return Lock(self, key, reentrant=reentrant, **options)

    def _template_labels(self, template: object) -> Labels:
        """The kit's metrics labels with a lock's key ``template`` added (checked)."""
        if not isinstance(template, str):
            raise TypeError(f"template must be a str, got {type(template).__name__}")
        return self.labels.with_template(template)

    def _default_options(self) -> dict[str, Any]:
        """The options of a lock that gives none: the kit's settings, checked
        once per config rather than on every ``kit.lock(key)`` (a handle per request)."""
        defaults = self._defaults
        if defaults is None or defaults[0] is not self.config:
            self._defaults = defaults = (
                self.config,
                lock_options(self, UNSET, UNSET, UNSET, False, None, None),
            )
        return defaults[1]

    def lock_maker(
        self,
        *,
        ttl: Seconds = UNSET,
        auto_renew: Any = UNSET,
        reentrant: bool = True,
        template: str | None = None,
    ) -> LockMaker:
        """``kit.lock(key, ttl=..., auto_renew=..., reentrant=..., template=..., owner=...)``
        as a function of ``key`` (and ``owner``), its options checked once: for code that
        makes a handle per request or task with the same options (the web guards, the task
        workers), where checking them again each time costs more than the handle itself."""
        options = lock_options(self, ttl, UNSET, auto_renew, False, None, None)
        del options["owner"]
        if template is not None:
            options["labels"] = self._template_labels(template)

        def make(key: str, owner: str | None = None) -> Lock:
            if owner is not None:
                check_owner(owner)
            # Lock copies on_lost: the handles share no list.
            return Lock(self, check_key(key), reentrant=reentrant, owner=owner, **options)

        return make

    def rwlock(
        self,
        key: str,
        *,
        ttl: Seconds = UNSET,
        auto_renew: Any = UNSET,
        on_lost: OnLost | Iterable[OnLost] | None = None,
    ) -> RWLock:
        """A read-write lock on ``key``: ``with kit.rwlock(key).read(timeout=5): ...``.
        Its places are leases like ``kit.lock()``'s: ``ttl``, ``auto_renew`` and
        ``on_lost`` mean the same (see :mod:`lockkit_core.shared`)."""
        check_key(key)
        self._require_shared("rwlock")
        return RWLock(self, key, lock_options(self, ttl, UNSET, auto_renew, False, on_lost, None))

    def semaphore(
        self,
        key: str,
        limit: int,
        *,
        timeout: Seconds = UNSET,
        ttl: Seconds = UNSET,
        auto_renew: Any = UNSET,
        on_lost: OnLost | Iterable[OnLost] | None = None,
        owner: str | None = None,
    ) -> Semaphore:
        """One of ``limit`` places on ``key``: ``with kit.semaphore(key, limit=3): ...``.
        The other arguments mean what they mean for ``kit.lock()``."""
        check_key(key)
        check_limit(limit)
        self._require_shared("semaphore")
        options = lock_options(self, ttl, timeout, auto_renew, False, on_lost, owner)
        return Semaphore(self, key, limit, options)

    def shared_parts(self, mode: str, limit: int) -> SharedKit:
        """What the handles of places of ``mode`` (and ``limit``) see of this kit, made once,
        so that a thread re-entering a read re-enters the same hold."""
        parts = self._shared.get((mode, limit))
        if parts is None:
            parts = self._shared.setdefault((mode, limit), SharedKit(self, mode, limit))
        return parts

    def _require_shared(self, what: str) -> None:
        if Capability.SHARED not in self.backend.capabilities:
            raise NotSupported(
                f"kit.{what}() needs a backend with read-write locks and semaphores; the "
                f"{self.backend.url.scheme}:// backend has none (memory://, file://, redis:// "
                "and zookeeper:// have them; `lockkit backends` lists every store's)"
            )

    def locked(
        self,
        key: str | Callable[..., str],
        *,
        ttl: Seconds = UNSET,
        timeout: Seconds = UNSET,
        auto_renew: Any = UNSET,
        reentrant: bool = True,
        fair: bool = False,
        on_lost: OnLost | Iterable[OnLost] | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a function so each call runs under the lock named by ``key``.

        ``key`` is a template filled from the call's arguments (``"report:{day}"``,
        ``"user:{user.id}"``) or a callable taking the same arguments. A busy lock raises
        :class:`LockTimeout` once ``timeout`` has passed (``timeout=0``: at once). On an
        ``async def`` the lock is awaited (``async with``), never blocking the event loop.
        """
        template = KeyTemplate(key)
        options = lock_options(self, ttl, timeout, auto_renew, fair, on_lost, None)
        shown = key if isinstance(key, str) else getattr(key, "__qualname__", repr(key))
        options["labels"] = self.labels.with_template(shown)

        def decorate(func: Callable[P, R]) -> Callable[P, R]:
            signature = template.check_signature(func)
            if inspect.iscoroutinefunction(func):
                # Awaited on the event loop (Lock.aacquire): waiting never blocks the loop.
                @functools.wraps(func)
                async def awrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                    name = template.render(signature, args, kwargs)
                    async with Lock(self, name, reentrant=reentrant, **options):
                        return await func(*args, **kwargs)

                return cast(Callable[P, R], awrapper)

            @functools.wraps(func)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                name = template.render(signature, args, kwargs)
                with Lock(self, name, reentrant=reentrant, **options):
                    return func(*args, **kwargs)

            return wrapper

        return decorate

    # -- lifecycle ----------------------------------------------------------------------------

    def _after_fork_in_child(self) -> None:
        self.holds.after_fork_in_child()
        for parts in self._shared.values():
            parts.holds.after_fork_in_child()
        self.backend.after_fork_in_child()
