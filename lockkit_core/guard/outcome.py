"""``GuardContext``: what one app guards requests with (kit, settings, log, counts,
``on_lost`` hooks); ``Outcome``: what the guard decided for one request and how it ends."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import BackendError, LockNotOwned
from ..kit import LockKit
from ..lock import Lock
from .problems import LockStoreDown, Problem, RequestKeyMissing, RequestLocked
from .settings import GuardSettings

__all__ = ["Counts", "GuardContext", "LostHook", "Outcome", "Problems"]

LostHook = Callable[[Lock, str, BaseException], None]


_RELEASING = threading.Lock()


class Counts(Counter[str]):
    """Refused, unlocked and lost requests by event: ``busy``, ``unavailable``,
    ``fail_open``, ``lost``, ``unreleased`` (and the idempotency layer's own)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def add(self, event: str) -> None:
        """Count one ``event``; safe from any thread."""
        with self._lock:
            self[event] += 1


@dataclass(frozen=True)
class Problems:
    """The error classes an adapter answers with (Flask's are also werkzeug exceptions)."""

    busy: type[RequestLocked] = RequestLocked
    down: type[LockStoreDown] = LockStoreDown
    missing: type[RequestKeyMissing] = RequestKeyMissing


@dataclass
class GuardContext:
    """What one app (Flask) or one ``LOCKKIT`` value (Django) guards requests with."""

    kit: LockKit
    settings: GuardSettings
    log: logging.Logger
    problems: Problems = field(default_factory=Problems)
    counts: Counts = field(default_factory=Counts)
    on_lost: list[LostHook] = field(default_factory=list)


@dataclass
class Outcome:
    """One request's answer from the guard. ``refusal`` set: answer with it, run nothing.
    Otherwise run the view; ``lock`` is the held lock (None: not locked, or failed open)."""

    lock: Lock | None = None
    refusal: Problem | None = None
    route: str = ""
    context: GuardContext | None = None

    def release(self) -> None:
        """Give the lock back, once. A lease lost while the request ran (force-released,
        expired) or a store failing at release is logged with the key, counted and told to the
        ``on_lost`` hooks; it never replaces the response, whose work is already done."""
        with _RELEASING:  # a close and a finalizer may race: one of them releases
            lock, context, self.lock = self.lock, self.context, None
        if lock is None or context is None:
            return
        try:
            lock.release()
        except LockNotOwned as exc:
            context.counts.add("lost")
            context.log.error(
                "%s: lock %r was lost while its request ran (another request may have run "
                "meanwhile; the response stands): %s", self.route, lock.key, exc,
            )  # fmt: skip
            self._tell(context, lock, exc)
        except BackendError as exc:  # down, demoted, or any other store failure
            context.counts.add("unreleased")
            context.log.error(
                "%s: lock %r not released, the store is down (it frees within its ttl): %s",
                self.route, lock.key, exc,
            )  # fmt: skip
            self._tell(context, lock, exc)

    def _tell(self, context: GuardContext, lock: Lock, exc: BaseException) -> None:
        for hook in context.on_lost:
            try:
                hook(lock, self.route, exc)
            except Exception:  # a broken hook must not turn a finished request into a 500
                context.log.exception("an on_lost hook failed for lock %r", lock.key)
