"""``LockKit`` (one per store and namespace) and the ``Lock`` handles it hands out.

A ``Lock`` is a handle; what is actually held is a ``_Hold``, shared by every handle that
re-enters the same key in the same thread, so the store is touched once per outermost
acquisition. Leases are tracked with the monotonic clock, measured from *before* the request
that obtained or extended them was sent, so ``check()`` can decide locally, without a round
trip, whether the lease may still be trusted.
"""

from __future__ import annotations

import functools
import heapq
import inspect
import itertools
import logging
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from . import lease
from .backends.base import Backend, Capability, Grant
from .config import UNSET, LockKitConfig, check_seconds
from .errors import (
    BackendError,
    BackendUnavailable,
    ConfigError,
    LockLost,
    LockNotOwned,
    LockTimeout,
    NotSupported,
)
from .keys import KeyTemplate, check_key, namespaced
from .registry import create_backend

__all__ = ["Lock", "LockKit", "OnLost"]

log = logging.getLogger("lockkit")

P = ParamSpec("P")
R = TypeVar("R")
OnLost = Callable[["Lock"], object]


def new_owner_token() -> str:
    """A fresh, unguessable 128-bit owner token (32 hex digits)."""
    return secrets.token_hex(16)


class _Hold:
    """One acquisition of one key on the store."""

    __slots__ = (
        "active",
        "auto_renew",
        "count",
        "deadline",
        "full_key",
        "lock",
        "lost_reason",
        "owner",
        "pid",
        "thread",
        "token",
        "ttl",
    )

    def __init__(self, lock: Lock, owner: str, token: int | None, deadline: float) -> None:
        self.lock = lock  # the handle whose on_lost callbacks and settings apply
        self.full_key = lock.full_key
        self.owner = owner
        self.token = token
        self.ttl = lock.ttl
        self.auto_renew = lock.auto_renew
        self.deadline = deadline
        self.count = 1
        self.thread = threading.get_ident()
        self.pid = os.getpid()
        self.lost_reason: str | None = None
        self.active = True

    def is_lost(self, now: float | None = None) -> bool:
        if self.lost_reason is not None:
            return True
        return (time.monotonic() if now is None else now) >= self.deadline


class _Watchdog:
    """One thread per kit that renews leases every ttl/3 and reports lost ones.

    Holds that neither renew nor have ``on_lost`` callbacks never reach it: they cost nothing.
    """

    def __init__(self, kit: LockKit) -> None:
        self._kit = weakref.ref(kit)
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Hold]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._compact_at = 256
        self._wake_at = 0.0  # when the sleeping thread wakes by itself; 0 while it is busy

    def schedule(self, hold: _Hold, due: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), hold))
            if len(self._heap) > self._compact_at:
                # Released holds are dropped lazily; sweep them when they pile up.
                self._heap = [entry for entry in self._heap if entry[2].active]
                heapq.heapify(self._heap)
                self._compact_at = max(256, 2 * len(self._heap))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="lockkit-watchdog", daemon=True
                )
                self._thread.start()
            elif due < self._wake_at:
                self._cond.notify()

    def reset_after_fork(self) -> None:
        self._wake_at = 0.0
        self._cond = threading.Condition()
        self._heap = []
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._heap:
                        self._wake_at = time.monotonic() + 30.0
                        self._cond.wait(30.0)
                        self._wake_at = 0.0
                        if not self._heap:
                            self._thread = None
                            return
                        continue
                    due, _, hold = self._heap[0]
                    now = time.monotonic()
                    # Released holds stay until their due time: popping them early would
                    # wake this thread (and take the GIL) once per acquisition.
                    if due > now:
                        self._wake_at = due
                        self._cond.wait(due - now)
                        self._wake_at = 0.0
                        continue
                    heapq.heappop(self._heap)
                    if hold.active:
                        break
            kit = self._kit()
            if kit is None:
                return
            try:
                kit._service(hold)
            except Exception:  # the watchdog must survive anything a callback does
                log.exception("lockkit watchdog failed on %s", hold.full_key)
            del kit


class Lock:
    """A handle on one key. Use it as a context manager, or ``acquire()``/``release()``.

    Get one from :meth:`LockKit.lock`; it is cheap and may be reused after release.
    """

    def __init__(
        self,
        kit: LockKit,
        key: str,
        *,
        ttl: float,
        timeout: float | None,
        auto_renew: bool,
        reentrant: bool,
        fair: bool,
        on_lost: Iterable[OnLost],
        owner: str | None,
    ) -> None:
        self.kit = kit
        self.key = key
        self.full_key = namespaced(kit.namespace, key)
        self.ttl = ttl
        self.timeout = timeout
        self.auto_renew = auto_renew
        self.reentrant = reentrant
        self.fair = fair
        self.on_lost: list[OnLost] = list(on_lost)
        self._given_owner = owner
        # thread ident -> [hold, depth]: a handle may be shared by threads like threading.Lock
        self._uses: dict[int, list[Any]] = {}
        self._last: _Hold | None = None  # what other threads and callbacks see

    def __repr__(self) -> str:
        state = "held" if self._view() is not None else "free"
        return f"<Lock {self.full_key!r} {state} token={self.token}>"

    def _here(self) -> _Hold | None:
        use = self._uses.get(threading.get_ident())
        return use[0] if use is not None else None

    def _view(self) -> _Hold | None:
        return self._here() or self._last

    # -- state -------------------------------------------------------------------------------

    @property
    def token(self) -> int | None:
        """The fencing token of the current acquisition (None when not held or unsupported)."""
        hold = self._view()
        return hold.token if hold is not None else None

    @property
    def owner(self) -> str | None:
        """The owner token. Pass it to ``kit.lock(key, owner=...)`` in another process to
        release or extend this acquisition there. Keep it secret: it is the key to the lock."""
        hold = self._view()
        return hold.owner if hold is not None else self._given_owner

    @property
    def lost(self) -> bool:
        """True once the lease ran out or renewal failed while we held it."""
        hold = self._view()
        return hold is not None and hold.is_lost()

    def owned(self) -> bool:
        """True while this thread holds the lock through this handle and the lease is valid."""
        hold = self._here()
        return hold is not None and hold.pid == os.getpid() and not hold.is_lost()

    def locked(self) -> bool:
        """True if anyone holds the key (asks the store)."""
        return self.kit.backend.info(self.full_key) is not None

    def check(self) -> None:
        """Raise :class:`LockLost` if the lease was lost; decided locally, never blocks."""
        hold = self._view()
        if hold is None:
            raise LockNotOwned(self.key, f"lock {self.key!r} is not held by this handle")
        if hold.pid != os.getpid():
            raise LockNotOwned(self.key, _inherited_message(self.key, hold))
        if hold.is_lost():
            raise LockLost(self.key, _lost_message(self.key, hold))

    # -- acquire / release -------------------------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: Any = UNSET) -> bool:
        """Take the lock; False if it stayed busy (``blocking=False``: after one attempt).

        ``timeout`` defaults to the handle's; ``None`` or ``-1`` waits forever.
        Raises :class:`BackendUnavailable` if the store cannot be reached: an outage is
        never reported as "busy".
        """
        if isinstance(timeout, bool):
            raise ConfigError(f"timeout must be a number of seconds or None, got {timeout!r}")
        if timeout is UNSET:
            timeout = self.timeout
        elif timeout == -1:
            timeout = None
        elif timeout is not None and timeout != 0:
            timeout = check_seconds("timeout", timeout, allow_none=True)
        if not blocking and timeout not in (None, 0, 0.0):
            raise ConfigError("acquire(blocking=False) takes no timeout")
        kit = self.kit
        me = threading.get_ident()
        use = self._uses.get(me)
        with kit._holds_lock:
            hold = kit._holds.get(self.full_key)
            if (
                self.reentrant
                and hold is not None
                and hold.thread == me
                and hold.pid == os.getpid()
                and hold.active
                and (use is None or use[0] is hold)
            ):
                if hold.is_lost():
                    raise LockLost(self.key, _lost_message(self.key, hold))
                hold.count += 1
                if use is None:
                    use = self._uses[me] = [hold, 0]
                use[1] += 1
                return True
        # Not re-entered: contend on the store like any other owner (a non-reentrant handle
        # taken twice by one thread waits on itself, as threading.Lock does).
        owner = self._given_owner or new_owner_token()
        hold = kit._acquire(self, owner, blocking=blocking and timeout != 0, timeout=timeout)
        if hold is None:
            return False
        self._uses[me] = [hold, 1]
        self._last = hold
        return True

    def release(self) -> None:
        """Release one level of reentrancy; the store is told when the outermost one ends.

        Raises :class:`LockNotOwned` if we do not hold it, :class:`LockLost` if the lease
        had run out (someone else may have held the key meanwhile).
        """
        me = threading.get_ident()
        use = self._uses.get(me)
        if use is None:
            if self._given_owner is not None:
                self.kit._release_foreign(self.key, self.full_key, self._given_owner)
                return
            where = "another thread" if self._uses else "nobody"
            raise LockNotOwned(
                self.key,
                f"cannot release {self.key!r}: this thread does not hold it through this "
                f"handle (held by {where}; locks are owned per thread)",
            )
        hold: _Hold = use[0]
        if hold.pid != os.getpid():
            raise LockNotOwned(self.key, _inherited_message(self.key, hold))
        use[1] -= 1
        if use[1] == 0:
            del self._uses[me]
            if self._last is hold:
                self._last = None
        with self.kit._holds_lock:
            hold.count -= 1
            if hold.count > 0:
                return
            hold.active = False
            if self.kit._holds.get(self.full_key) is hold:
                del self.kit._holds[self.full_key]
        self.kit._release(self.key, hold)

    def extend(self, ttl: float | None = None) -> None:
        """Reset the lease to ``ttl`` seconds (default: the lock's ttl) from now."""
        new_ttl = self.ttl if ttl is None else check_seconds("ttl", ttl, allow_none=False)
        assert new_ttl is not None
        hold = self._view()
        if hold is None:
            if self._given_owner is None:
                raise LockNotOwned(self.key, f"cannot extend {self.key!r}: not held")
            self.kit._extend_foreign(self.key, self.full_key, self._given_owner, new_ttl)
            return
        self.check()
        self.kit._extend(hold, new_ttl, raise_on_loss=True)

    def __enter__(self) -> Lock:
        if not self.acquire():
            raise LockTimeout(
                self.key,
                f"lock {self.key!r} is held elsewhere"
                + (f"; gave up after {self.timeout:g} s" if self.timeout else ""),
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except LockNotOwned as lost:
            if exc is None:
                raise
            exc.add_note(f"lockkit: {lost}")

    def _fire_lost(self) -> None:
        for callback in self.on_lost:
            try:
                callback(self)
            except Exception:
                log.exception("on_lost callback %r failed for %s", callback, self.full_key)


def _lost_message(key: str, hold: _Hold) -> str:
    reason = hold.lost_reason or "its lease ran out before it was renewed"
    return f"lock {key!r} was lost: {reason}; another owner may have held it since"


def _inherited_message(key: str, hold: _Hold) -> str:
    return (
        f"lock {key!r} was acquired by process {hold.pid} before a fork; "
        "a child never releases or renews its parent's locks"
    )


_kits: weakref.WeakSet[LockKit] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for kit in list(_kits):
        kit._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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
        ttl: Any = UNSET,
        auto_renew: Any = UNSET,
        timeout: Any = UNSET,
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
        if "ttl" in changes:
            changes["ttl"] = check_seconds("ttl", changes["ttl"], allow_none=False)
        self.config = base.replace(**changes) if changes else base
        self.namespace = self.config.namespace
        self.backend: Backend = create_backend(self.config.url, self.config.options)
        self._holds: dict[str, _Hold] = {}
        self._holds_lock = threading.Lock()
        self._watchdog = _Watchdog(self)
        from .admin import Admin

        self.admin = Admin(self)
        _kits.add(self)

    @classmethod
    def from_config(cls, mapping: Mapping[str, Any] | None = None, **overrides: Any) -> LockKit:
        """Build from a settings mapping (``URL``, ``NAMESPACE``, ``TTL``, ...)."""
        return cls(config=LockKitConfig.from_mapping(mapping, **overrides))

    def __repr__(self) -> str:
        return f"<LockKit {self.backend.describe()} namespace={self.namespace!r}>"

    def close(self) -> None:
        """Close the store's connections. Held locks stay held until their TTL."""
        self.backend.close()

    def __enter__(self) -> LockKit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- handles -----------------------------------------------------------------------------

    def lock(
        self,
        key: str,
        *,
        ttl: Any = UNSET,
        timeout: Any = UNSET,
        auto_renew: Any = UNSET,
        reentrant: bool = True,
        fair: bool = False,
        on_lost: OnLost | Iterable[OnLost] | None = None,
        owner: str | None = None,
    ) -> Lock:
        """A handle on ``key``. Arguments left out come from the kit's settings.

        ``owner`` adopts an acquisition made elsewhere (another process) so that it can be
        released or extended here.
        """
        check_key(key)
        options = self._lock_options(ttl, timeout, auto_renew, fair, on_lost, owner)
        return Lock(self, key, reentrant=reentrant, **options)

    def _lock_options(
        self,
        ttl: Any,
        timeout: Any,
        auto_renew: Any,
        fair: bool,
        on_lost: OnLost | Iterable[OnLost] | None,
        owner: str | None,
    ) -> dict[str, Any]:
        cfg = self.config
        real_ttl = cfg.ttl if ttl is UNSET else check_seconds("ttl", ttl, allow_none=False)
        if timeout is UNSET:
            real_timeout = cfg.timeout
        elif timeout == 0 and not isinstance(timeout, bool):
            real_timeout = 0.0
        else:
            real_timeout = check_seconds("timeout", timeout, allow_none=True)
        renew = cfg.auto_renew if auto_renew is UNSET else auto_renew
        if not isinstance(renew, bool):
            raise ConfigError(f"auto_renew must be True or False, got {renew!r}")
        if not isinstance(fair, bool):
            raise ConfigError(f"fair must be True or False, got {fair!r}")
        if fair and Capability.FAIR not in self.backend.capabilities:
            raise NotSupported(
                f"the {self.backend.url.scheme}:// backend cannot queue waiters in order; "
                "drop fair=True or use memory://"
            )
        if owner is not None and (not isinstance(owner, str) or len(owner) != 32):
            raise ConfigError("owner must be the 32-character token of an existing acquisition")
        callbacks: list[OnLost]
        if on_lost is None:
            callbacks = []
        elif callable(on_lost):
            callbacks = [on_lost]
        else:
            callbacks = list(on_lost)
            if not all(callable(c) for c in callbacks):
                raise ConfigError("on_lost must be a callable or a list of callables")
        return {
            "ttl": real_ttl,
            "timeout": real_timeout,
            "auto_renew": renew,
            "fair": fair,
            "on_lost": callbacks,
            "owner": owner,
        }

    def locked(
        self,
        key: str | Callable[..., str],
        *,
        ttl: Any = UNSET,
        timeout: Any = UNSET,
        auto_renew: Any = UNSET,
        reentrant: bool = True,
        fair: bool = False,
        on_lost: OnLost | Iterable[OnLost] | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a function so each call runs under the lock named by ``key``.

        ``key`` is a template filled from the call's arguments (``"report:{day}"``,
        ``"user:{user.id}"``) or a callable taking the same arguments. A busy lock raises
        :class:`LockTimeout` once ``timeout`` has passed (``timeout=0``: at once).
        """
        template = KeyTemplate(key)
        options = self._lock_options(ttl, timeout, auto_renew, fair, on_lost, None)

        def decorate(func: Callable[P, R]) -> Callable[P, R]:
            if inspect.iscoroutinefunction(func):
                raise ConfigError(
                    f"@kit.locked cannot wrap the coroutine function {func.__qualname__}: "
                    "a blocking lock would stall the event loop; lock inside it instead"
                )
            signature = template.check_signature(func)

            @functools.wraps(func)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                name = template.render(signature, args, kwargs)
                with Lock(self, name, reentrant=reentrant, **options):
                    return func(*args, **kwargs)

            return wrapper

        return decorate

    # -- the protocol with the backend ---------------------------------------------------------

    def _acquire(
        self, lock: Lock, owner: str, *, blocking: bool, timeout: float | None
    ) -> _Hold | None:
        backend = self.backend
        ttl = lock.ttl
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        waiter = None
        acquired = False
        reachable = True
        too_slow: float | None = None
        try:
            if blocking and backend.queue_first():
                waiter = backend.waiter(lock.full_key, owner, lock.fair)
            while True:
                sent = time.monotonic()
                grant: Grant = backend.try_acquire(lock.full_key, owner, ttl)
                while True:
                    now = time.monotonic()
                    if grant.acquired:
                        if grant.since is not None:
                            sent = grant.since
                            if now - sent > ttl / 10:
                                # Handed over long after we queued: confirm, so the lease
                                # is measured from a recent request, not from the queueing.
                                break
                        valid_until = sent + lease.validity(ttl)
                        late = blocking and deadline is not None and timeout and now > deadline
                        if now >= valid_until or late:
                            if lock._given_owner is None:  # an adopted lease is not ours
                                self._give_back(lock.full_key, owner)
                            if now >= valid_until:
                                too_slow = now - sent
                            else:
                                return None
                        else:
                            acquired = True
                            return self._register(lock, owner, grant.token, valid_until)
                    if not blocking:
                        break
                    remaining = None if deadline is None else deadline - now
                    if remaining is not None and remaining <= 0:
                        break
                    if waiter is None:
                        # Register before the next attempt so a release in between wakes us.
                        waiter = backend.waiter(lock.full_key, owner, lock.fair)
                        break
                    retry_after = grant.retry_after if too_slow is None else lease.MIN_WAIT * 10
                    handed = waiter.wait(lease.next_wait(retry_after, remaining))
                    if handed is None:
                        break
                    grant = handed
                if not blocking or (deadline is not None and time.monotonic() >= deadline):
                    break
        except BackendUnavailable:
            reachable = False  # leaving the queue would cost the caller another timeout
            raise
        finally:
            if waiter is not None:
                waiter.close(acquired, reachable=reachable)
        if too_slow is not None:
            raise BackendUnavailable(
                f"the grant of {lock.key!r} took {too_slow:.3f} s to arrive, past its "
                f"{ttl:g} s lease; the link to the store is slower than the TTL"
            )
        return None

    def _give_back(self, full_key: str, owner: str) -> None:
        try:
            self.backend.release(full_key, owner)
        except BackendError:
            log.warning("could not give back a late grant of %s; it expires by TTL", full_key)

    def _register(self, lock: Lock, owner: str, token: int | None, valid_until: float) -> _Hold:
        hold = _Hold(lock, owner, token, valid_until)
        with self._holds_lock:
            self._holds[lock.full_key] = hold
        if hold.auto_renew:
            self._watchdog.schedule(hold, time.monotonic() + lease.renew_interval(hold.ttl))
        elif lock.on_lost:
            self._watchdog.schedule(hold, valid_until)
        return hold

    def _release(self, key: str, hold: _Hold) -> None:
        was_lost = hold.is_lost()
        released = self.backend.release(hold.full_key, hold.owner)
        if was_lost or not released:
            if hold.lost_reason is None:
                hold.lost_reason = (
                    "its lease ran out before release"
                    if was_lost
                    else "the store no longer had it under our owner token at release"
                )
            raise LockLost(key, _lost_message(key, hold))

    def _release_foreign(self, key: str, full_key: str, owner: str) -> None:
        if not self.backend.release(full_key, owner):
            raise LockNotOwned(key, f"cannot release {key!r}: that owner token does not hold it")

    def _extend_foreign(self, key: str, full_key: str, owner: str, ttl: float) -> None:
        if not self.backend.extend(full_key, owner, ttl):
            raise LockNotOwned(key, f"cannot extend {key!r}: that owner token does not hold it")

    def _extend(self, hold: _Hold, ttl: float, *, raise_on_loss: bool) -> bool:
        sent = time.monotonic()
        if hold.is_lost(sent):
            # Once lost, always lost: the caller may already have been told so.
            self._mark_lost(hold, hold.lost_reason or "its lease ran out before it was renewed")
            if raise_on_loss:
                raise LockLost(hold.lock.key, _lost_message(hold.lock.key, hold))
            return False
        if self.backend.extend(hold.full_key, hold.owner, ttl):
            hold.deadline = max(hold.deadline, sent + lease.validity(ttl))
            hold.ttl = ttl
            return True
        self._mark_lost(hold, "the store no longer had it under our owner token when extending")
        if raise_on_loss:
            raise LockLost(hold.lock.key, _lost_message(hold.lock.key, hold))
        return False

    def _mark_lost(self, hold: _Hold, reason: str) -> None:
        first = hold.lost_reason is None
        if first:
            hold.lost_reason = reason
            log.warning("lock %s lost: %s", hold.full_key, reason)
            hold.lock._fire_lost()

    def _service(self, hold: _Hold) -> None:
        """Run by the watchdog: renew ``hold`` or report it lost."""
        if not hold.active or hold.pid != os.getpid():
            return
        if hold.is_lost():
            self._mark_lost(hold, hold.lost_reason or "its lease ran out before it was renewed")
            return
        if not hold.auto_renew:
            self._watchdog.schedule(hold, hold.deadline)
            return
        try:
            renewed = self._extend(hold, hold.ttl, raise_on_loss=False)
        except BackendError as exc:
            if not hold.active:
                return
            now = time.monotonic()
            if now >= hold.deadline:
                self._mark_lost(hold, f"renewal failed until the lease ran out ({exc})")
                return
            log.warning("renewing %s failed, retrying: %s", hold.full_key, exc)
            due = min(now + lease.retry_interval(hold.ttl), hold.deadline)
            self._watchdog.schedule(hold, due)
            return
        if renewed and hold.active:
            self._watchdog.schedule(hold, time.monotonic() + lease.renew_interval(hold.ttl))

    def _after_fork_in_child(self) -> None:
        self._holds_lock = threading.Lock()
        self._holds = {}
        self._watchdog.reset_after_fork()
        self.backend.after_fork_in_child()
