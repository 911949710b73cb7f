"""``LockRule``: which requests lock, on what key, how long they wait, and how the lock ends.

One rule type serves ``@lock_view`` and the middleware's ``PathRule``. The lock is
``reentrant=False``: it belongs to the request, so the thread that closes a stream (or runs
``asyncio.to_thread`` for an async view) may release it. It is released

* when the view raises;
* when a streamed response is closed (the server calls ``response.close()``);
* inside a transaction (``ATOMIC_REQUESTS``), after the commit (``transaction.on_commit``),
  so the next request sees the data. If the commit itself fails, Django drops the callback
  and the handle with it: the core stops renewing a dropped hold, so it frees within its ttl;
* otherwise when the view returns.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from django.db import connections, transaction
from django.http import HttpRequest, HttpResponseBase
from django.utils.module_loading import import_string

from lockkit_core import BackendUnavailable, ConfigError, Lock, LockNotOwned
from lockkit_core.config import UNSET, check_timeout, check_ttl

from .keys import KeyFunc, RequestKey
from .problems import LockStoreDown, RequestLocked, mark_refusal, problem_response

if TYPE_CHECKING:
    from .conf import LockKitState

__all__ = [
    "HTTP_METHODS",
    "Attempt",
    "LockRule",
    "OnBusy",
    "PathRule",
    "after_commit",
    "rule_from_mapping",
]

log = logging.getLogger("lockkit.django")

OnBusy = Callable[[HttpRequest, RequestLocked], HttpResponseBase]
HTTP_METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)


@dataclass
class Attempt:
    """One request's lock: the handle, how long to wait, and the state's counters."""

    lock: Lock
    wait: float | None
    retry_after: int
    count: Callable[[str], None]
    held: bool = False


class LockRule:
    """Lock requests on ``key``; ``wait`` seconds before a busy lock answers 409."""

    def __init__(
        self,
        key: str | KeyFunc,
        *,
        wait: Any = UNSET,
        ttl: Any = None,
        methods: Iterable[str] | None = None,
        fail_open: bool = False,
        on_busy: OnBusy | None = None,
    ) -> None:
        self.key = RequestKey(key)
        self.wait = UNSET if wait is UNSET else check_timeout(wait, "wait")
        self.ttl = UNSET if ttl is None or ttl is UNSET else check_ttl(ttl)
        if isinstance(methods, str):
            raise ConfigError(f"methods must be a list such as [{methods!r}], not a string")
        self.methods = None if methods is None else frozenset(str(m).upper() for m in methods)
        if self.methods is not None and not self.methods <= HTTP_METHODS:
            raise ConfigError(
                f"methods {sorted(self.methods - HTTP_METHODS)} are not HTTP methods; "
                f"use some of {sorted(HTTP_METHODS)}"
            )
        if not isinstance(fail_open, bool):
            raise ConfigError(f"fail_open must be True or False, got {fail_open!r}")
        self.fail_open = fail_open
        if on_busy is not None and not callable(on_busy):
            raise ConfigError(f"on_busy must be a callable (request, exc), got {on_busy!r}")
        self.on_busy = on_busy

    def applies(self, request: HttpRequest) -> bool:
        """Whether ``request``'s method is one this rule locks."""
        return self.methods is None or request.method in self.methods

    def plan(
        self, request: HttpRequest, url_kwargs: Mapping[str, Any], state: LockKitState
    ) -> Attempt:
        """The lock for ``request`` (no I/O); raises RequestKeyMissing for a 400."""
        key = self.key.render(request, url_kwargs)
        wait = state.settings.wait if self.wait is UNSET else self.wait
        lock = state.kit.lock(key, ttl=self.ttl, timeout=wait, reentrant=False)
        return Attempt(lock, wait, state.settings.retry_after, state.count)

    def take(self, request: HttpRequest, attempt: Attempt) -> HttpResponseBase | None:
        """Acquire (this may wait): None to go on, or the response refusing the request."""
        try:
            attempt.held = attempt.lock.acquire(timeout=attempt.wait)
        except BackendUnavailable as exc:
            if self.fail_open:
                attempt.count("fail_open")
                log.warning(
                    "%s %s runs WITHOUT its lock %r: the lock store is down and the rule "
                    "fails open (%s)",
                    request.method,
                    request.path,
                    attempt.lock.key,
                    exc,
                )
                return None
            attempt.count("unavailable")
            log.error("%s %s refused (503): lock store down: %s", request.method, request.path, exc)
            return problem_response(LockStoreDown(attempt.lock.key, attempt.retry_after))
        if attempt.held:
            return None
        attempt.count("busy")
        log.info("%s %s refused (409): %r is held", request.method, request.path, attempt.lock.key)
        busy = RequestLocked(attempt.lock.key, attempt.retry_after)
        if self.on_busy is None:
            return problem_response(busy)
        return mark_refusal(self.on_busy(request, busy))

    def finish(self, attempt: Attempt, response: HttpResponseBase) -> HttpResponseBase:
        """Hand the lock to whatever ends the request: a stream's close, the commit, or now."""
        if not attempt.held:
            return response
        if response.streaming:
            _release_on_close(response, lambda: release(attempt))
            return response
        after_commit(lambda: release(attempt))
        return response


def after_commit(callback: Callable[[], None]) -> None:
    """Run ``callback`` now, or once every transaction open on any database has committed
    (``ATOMIC_REQUESTS``). On a rollback it never runs."""
    atomic = [alias for alias in connections if _in_atomic_block(alias)]
    if not atomic:
        callback()
        return
    pending = set(atomic)

    def committed(alias: str) -> None:
        pending.discard(alias)
        if not pending:
            callback()

    for alias in atomic:
        # robust=True: a failing callback registered before ours must not skip this one.
        transaction.on_commit(functools.partial(committed, alias), using=alias, robust=True)


def _in_atomic_block(alias: str) -> bool:
    conn = connections[alias]
    return bool(conn.connection is not None and conn.in_atomic_block)


def _release_on_close(response: HttpResponseBase, release_lock: Callable[[], None]) -> None:
    close = response.close

    def close_then_release() -> None:
        try:
            close()
        finally:
            release_lock()

    # An instance attribute: the server calls response.close() when the stream ends or the
    # client goes away; the lock must not outlive the bytes it protects.
    response.close = close_then_release  # type: ignore[method-assign]


def release(attempt: Attempt) -> None:
    """Give the lock back once. A lease lost while the request ran is logged and counted:
    the response stands (its work is done), but exclusion was not guaranteed meanwhile."""
    if not attempt.held:
        return
    attempt.held = False
    try:
        attempt.lock.release()
    except LockNotOwned as exc:
        attempt.count("lost")
        log.error("lock %r was lost while its request ran: %s", attempt.lock.key, exc)
    except BackendUnavailable as exc:
        log.error(
            "lock %r not released (store down; it frees within its ttl): %s", attempt.lock.key, exc
        )


_RULE_KEYS: Final = ("PATH", "METHODS", "KEY", "WAIT", "TTL", "FAIL_OPEN", "ON_BUSY")


class PathRule(LockRule):
    """A middleware rule: requests whose path matches ``PATH`` lock on ``KEY``; the regex's
    named groups are the URL arguments of the key template."""

    def __init__(self, path: str, key: str | KeyFunc, **options: Any) -> None:
        super().__init__(key, **options)
        try:
            self.path = re.compile(path)
        except (re.error, TypeError) as exc:
            raise ConfigError(f"PATH {path!r} is not a regular expression: {exc}") from exc
        groups = set(self.path.groupindex)
        missing = [f for f in self.key.url_fields() if f not in groups]
        if missing:
            raise ConfigError(
                f"KEY {self.key.template!r} names {', '.join(missing)}, which PATH "
                f"{path!r} does not capture; add (?P<{missing[0]}>...) to PATH"
            )

    def match(self, request: HttpRequest) -> dict[str, Any] | None:
        """The URL arguments if this rule applies to ``request``, else None."""
        if not self.applies(request):
            return None
        found = self.path.search(request.path_info)
        return None if found is None else found.groupdict()


def rule_from_mapping(raw: Mapping[str, Any], where: str) -> PathRule:
    """Build a :class:`PathRule` from a ``LOCKKIT['MIDDLEWARE']['RULES']`` entry."""
    rule = {str(k).upper(): v for k, v in raw.items()}
    unknown = sorted(set(rule) - set(_RULE_KEYS))
    if unknown:
        raise ConfigError(f"{where} has unknown keys {unknown}; known: {', '.join(_RULE_KEYS)}")
    for needed in ("PATH", "KEY"):
        if needed not in rule:
            raise ConfigError(
                f"{where} needs {needed}, e.g. {{'PATH': r'^/orders/"
                "(?P<order_id>\\d+)/pay/$', 'KEY': 'order:{order_id}'}"
            )
    key = rule["KEY"]
    if isinstance(key, str) and key.startswith("callable:"):
        try:
            key = import_string(key.removeprefix("callable:"))
        except ImportError as exc:
            raise ConfigError(f"{where} KEY {rule['KEY']!r} cannot be imported: {exc}") from exc
    on_busy = rule.get("ON_BUSY")
    if isinstance(on_busy, str):
        try:
            on_busy = import_string(on_busy)
        except ImportError as exc:
            raise ConfigError(f"{where} ON_BUSY {on_busy!r} cannot be imported: {exc}") from exc
    try:
        return PathRule(
            rule["PATH"],
            key,
            wait=rule.get("WAIT", UNSET),
            ttl=rule.get("TTL"),
            methods=rule.get("METHODS"),
            fail_open=rule.get("FAIL_OPEN", False),
            on_busy=on_busy,
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
