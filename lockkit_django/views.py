"""``@lock_view`` for function views, and ``LockViewMixin`` for class-based views.

::

    @require_POST
    @lock_view("order:{order_id}", wait=2)
    def pay(request, order_id): ...

    @method_decorator(lock_view("cart:{session}"), name="dispatch")
    class CheckoutView(View): ...

    class RefundView(LockViewMixin, View):
        lock_key = "order:{order_id}"
        lock_methods = ["POST"]

The view finds its lock in ``request.lockkit_lock`` (``.token`` for
:func:`~lockkit_django.fenced_update`). A busy lock answers 409 ``application/problem+json``
with ``Retry-After``; a store that is down answers 503 unless ``fail_open=True``. Async
views stay coroutine functions: the lock is taken in a worker thread, so waiting never
blocks the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, ClassVar, TypeVar, cast

from django.http import HttpRequest, HttpResponseBase

from lockkit_core import ConfigError, Lock
from lockkit_core.config import UNSET

from .conf import lockkit_state
from .keys import KeyFunc, RequestKeyMissing
from .problems import problem_response
from .rules import LockRule, OnBusy, release

__all__ = ["LockViewMixin", "lock_view", "run_locked", "run_locked_async"]

V = TypeVar("V", bound=Callable[..., Any])
_View = Callable[[], HttpResponseBase]
_AsyncView = Callable[[], Awaitable[HttpResponseBase]]


def _expose(request: HttpRequest, lock: Lock | None) -> None:
    """``request.lockkit_lock``: the held lock (its ``token`` fences writes), or None when
    the rule failed open."""
    request.lockkit_lock = lock  # type: ignore[attr-defined]


def run_locked(
    rule: LockRule, request: HttpRequest, url_kwargs: Mapping[str, Any], call: _View
) -> HttpResponseBase:
    """Run ``call`` under ``rule``'s lock for ``request`` (sync)."""
    if not rule.applies(request):
        return call()
    try:
        attempt = rule.plan(request, url_kwargs, lockkit_state())
    except RequestKeyMissing as exc:
        return problem_response(exc)
    refusal = rule.take(request, attempt)
    if refusal is not None:
        return refusal
    _expose(request, attempt.lock if attempt.held else None)
    try:
        response = call()
    except BaseException:
        release(attempt)
        raise
    return rule.finish(attempt, response)


async def run_locked_async(
    rule: LockRule, request: HttpRequest, url_kwargs: Mapping[str, Any], call: _AsyncView
) -> HttpResponseBase:
    """Run ``call`` under ``rule``'s lock for ``request``; store round trips run in a thread."""
    if not rule.applies(request):
        return await call()
    try:
        attempt = rule.plan(request, url_kwargs, lockkit_state())
    except RequestKeyMissing as exc:
        return problem_response(exc)
    refusal = await asyncio.to_thread(rule.take, request, attempt)
    if refusal is not None:
        return refusal
    _expose(request, attempt.lock if attempt.held else None)
    try:
        response = await call()
    except BaseException:
        await asyncio.to_thread(release, attempt)
        raise
    if response.streaming:
        return rule.finish(attempt, response)
    await asyncio.to_thread(release, attempt)
    return response


def lock_view(
    key: str | KeyFunc,
    *,
    wait: Any = UNSET,
    ttl: Any = None,
    methods: Iterable[str] | None = None,
    fail_open: bool = False,
    on_busy: OnBusy | None = None,
) -> Callable[[V], V]:
    """Run the view under the lock named by ``key`` (see :mod:`lockkit_django.keys`).

    ``wait``: seconds to wait for a busy lock before answering 409 (default
    ``LOCKKIT['WAIT']``, 0); ``ttl``: the lease (default ``LOCKKIT['TTL']``, renewed while
    the view runs); ``methods``: only these HTTP methods lock; ``fail_open``: run unlocked,
    with a warning logged, when the store is down (default: 503); ``on_busy(request, exc)``
    answers a busy request instead of the 409.
    """
    rule = LockRule(key, wait=wait, ttl=ttl, methods=methods, fail_open=fail_open, on_busy=on_busy)

    def decorate(view: V) -> V:
        if inspect.iscoroutinefunction(view):

            @functools.wraps(view)
            async def locked_async(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                return await run_locked_async(
                    rule, request, kwargs, lambda: view(request, *args, **kwargs)
                )

            return cast(V, locked_async)

        @functools.wraps(view)
        def locked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            return run_locked(rule, request, kwargs, lambda: view(request, *args, **kwargs))

        return cast(V, locked)

    return decorate


class LockViewMixin:
    """Lock a class-based view's ``dispatch``; sync and async views alike.

    Set ``lock_key`` (a template or a callable ``(request, **kwargs)``), and optionally
    ``lock_wait``, ``lock_ttl``, ``lock_methods``, ``lock_fail_open``.
    """

    lock_key: ClassVar[str | KeyFunc | None] = None
    lock_wait: ClassVar[Any] = UNSET
    lock_ttl: ClassVar[Any] = None
    lock_methods: ClassVar[Iterable[str] | None] = None
    lock_fail_open: ClassVar[bool] = False
    _lock_rule: ClassVar[LockRule | None] = None

    @classmethod
    def lock_rule(cls) -> LockRule:
        """The rule this class's attributes describe, built once per class."""
        rule = cls.__dict__.get("_lock_rule")
        if rule is None:
            if cls.lock_key is None:
                raise ConfigError(f"{cls.__qualname__} uses LockViewMixin but sets no lock_key")
            rule = LockRule(
                cls.lock_key,
                wait=cls.lock_wait,
                ttl=cls.lock_ttl,
                methods=cls.lock_methods,
                fail_open=cls.lock_fail_open,
            )
            cls._lock_rule = rule
        return rule

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        """``View.dispatch`` under the lock."""
        parent = super().dispatch  # type: ignore[misc]
        rule = self.lock_rule()
        if getattr(self, "view_is_async", False):
            return run_locked_async(rule, request, kwargs, lambda: parent(request, *args, **kwargs))
        return run_locked(rule, request, kwargs, lambda: parent(request, *args, **kwargs))
