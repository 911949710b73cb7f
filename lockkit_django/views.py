"""``@lock_view`` for function views, ``LockViewMixin`` for class-based views, and the one
run-under-the-guard flow they and :class:`~lockkit_django.LockMiddleware` share.

::

    @require_POST
    @lock_view("order:{order_id}", wait=2)
    def pay(request, order_id): ...

    @method_decorator(lock_view("cart:{session}"), name="dispatch")
    class CheckoutView(View): ...

    class RefundView(LockViewMixin, View):
        lock_key = "order:{order_id}"
        lock_methods = ["POST"]

Every decision is the core guard's (:mod:`lockkit_core.guard`). The view finds its lock in
``request.lockkit_lock`` (``.token`` for :func:`~lockkit_django.fenced_update`). Async views
stay coroutine functions: the lock is taken in a worker thread, so waiting never blocks the
event loop.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar, cast

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponseBase

from lockkit_core import ConfigError, Lock
from lockkit_core.config import UNSET, Seconds
from lockkit_core.guard import (
    GuardContext,
    KeyFunc,
    Outcome,
    Problem,
    RequestLocked,
    RequestRule,
    Scope,
)
from lockkit_core.guard.run import Hooks, Values, arun, run

from .conf import lockkit_state
from .problems import mark_refusal, problem_response
from .release import release_with
from .sources import SOURCES, values

__all__ = ["RULE", "LockViewMixin", "OnBusy", "arun_locked", "lock_view", "run_locked"]

#: The rule of a ``@lock_view`` wrapper, read by the system checks that walk the URLs.
RULE = "lockkit_rule"

V = TypeVar("V", bound=Callable[..., Any])
OnBusy = Callable[[HttpRequest, RequestLocked], HttpResponseBase]


def _route(request: HttpRequest, default: str) -> str:
    match = getattr(request, "resolver_match", None)
    return getattr(match, "view_name", None) or default


def _refuse(problem: Problem, answer: Any) -> HttpResponseBase:
    return problem_response(problem) if answer is None else mark_refusal(answer)


def _hooks(request: HttpRequest) -> Hooks[HttpResponseBase]:
    def expose(lock: Lock | None) -> None:
        request.lockkit_lock = lock  # type: ignore[attr-defined]

    return Hooks(refuse=_refuse, expose=expose, attach=_attach)


def _attach(response: HttpResponseBase, outcome: Outcome) -> HttpResponseBase:
    """Hand the release to whatever ends the response; a stream also gets its
    ``STREAM_MAX_HOLD``."""
    if response.streaming:
        outcome.hold_stream()
    return release_with(response, outcome.release)


def _values(rule: RequestRule, request: HttpRequest, url_kwargs: Mapping[str, Any]) -> Values:
    if rule.key.func is not None:
        return lambda func: func(request, **url_kwargs)
    if rule.key.url_only:
        return url_kwargs  # nothing to read from the request
    return _Lazy(functools.partial(values, request, url_kwargs, rule.key.fields))


class _Lazy(Mapping[str, Any]):
    """The sources, read when the key is built (from async code: in the request's thread)."""

    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self._read = read
        self._found: dict[str, Any] | None = None

    def _values(self) -> dict[str, Any]:
        if self._found is None:
            self._found = self._read()
        return self._found

    def __getitem__(self, name: str) -> Any:
        return self._values()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values())

    def __len__(self) -> int:
        return len(self._values())


async def _read(read: Callable[[], str | Outcome]) -> str | Outcome:
    # The user and the session may query the database: in the request's own thread, where
    # Django manages connections, never in a plain worker thread.
    return await sync_to_async(read, thread_sensitive=True)()


async def _read_here(read: Callable[[], str | Outcome]) -> str | Outcome:
    return read()


#: The sources whose reading may query the database (a lazy user, a session store).
_DATABASE_SOURCES = frozenset({"user", "session"})


def _reader(rule: RequestRule) -> Callable[[Callable[[], str | Outcome]], Awaitable[str | Outcome]]:
    """How an async request reads ``rule``'s key. Under an ASGI server the request's first
    thread-sensitive call starts a thread of its own that lives until the response (asgiref's
    ThreadSensitiveContext): a key of URL arguments, headers, query or body is read on the loop,
    so a request waiting for its lock takes no thread; a callable key or the user or session
    is read in the request's thread."""
    if rule.key.func is not None or _DATABASE_SOURCES & set(rule.key.fields):
        return _read
    return _read_here


def run_locked(
    rule: RequestRule,
    request: HttpRequest,
    url_kwargs: Mapping[str, Any],
    call: Callable[[], HttpResponseBase],
    route: str,
    guard: GuardContext | None = None,
) -> HttpResponseBase:
    """Run ``call`` under ``rule``'s lock for ``request``; ``guard``: the context of
    ``settings.LOCKKIT``, if the caller has it already."""
    guard = guard or lockkit_state().guard
    vals = _values(rule, request, url_kwargs)
    return run(rule, guard, request, route, vals, call, _hooks(request))


async def arun_locked(
    rule: RequestRule,
    request: HttpRequest,
    url_kwargs: Mapping[str, Any],
    call: Callable[[], Awaitable[HttpResponseBase]],
    route: str,
    guard: GuardContext | None = None,
) -> HttpResponseBase:
    """:func:`run_locked` for async code."""
    guard = guard or lockkit_state().guard
    vals = _values(rule, request, url_kwargs)
    return await arun(rule, guard, request, route, vals, call, _hooks(request), _reader(rule))


def _rule(key: str | KeyFunc, **options: Any) -> RequestRule:
    return RequestRule(key, sources=SOURCES, **options)


def lock_view(
    key: str | KeyFunc,
    *,
    wait: Seconds = UNSET,
    ttl: Seconds = UNSET,
    methods: Iterable[str] | None = None,
    fail_open: bool = False,
    on_busy: OnBusy | None = None,
    scope: Scope = "global",
) -> Callable[[V], V]:
    """Run the view under the lock named by ``key`` (see :mod:`lockkit_django.sources`).

    ``wait``: seconds to wait for a busy lock before answering 409 (default
    ``LOCKKIT['WAIT']``, 0); ``ttl``: the lease (default ``LOCKKIT['TTL']``, renewed while
    the view runs); ``methods``: only these HTTP methods lock; ``fail_open``: run unlocked,
    with a warning logged, when the store is down (default: 503); ``on_busy(request, exc)``
    answers a busy request instead of the 409; ``scope="route"`` prefixes the key with the
    view's name. A template field that is neither a view argument nor a source is a
    ConfigError here, not a 500 at the first request.
    """
    rule = _rule(
        key, wait=wait, ttl=ttl, methods=methods, fail_open=fail_open, on_busy=on_busy,
        scope=scope,
    )  # fmt: skip

    def decorate(view: V) -> V:
        first = next(iter(inspect.signature(view).parameters), "request")
        rule.key.check_view(view, skip=(first,))
        name = getattr(view, "__qualname__", repr(view))
        if inspect.iscoroutinefunction(view):

            @functools.wraps(view)
            async def locked_async(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                call = functools.partial(view, request, *args, **kwargs)
                return await arun_locked(rule, request, kwargs, call, _route(request, name))

            setattr(locked_async, RULE, rule)
            return cast(V, locked_async)

        @functools.wraps(view)
        def locked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            call = functools.partial(view, request, *args, **kwargs)
            return run_locked(rule, request, kwargs, call, _route(request, name))

        setattr(locked, RULE, rule)
        return cast(V, locked)

    return decorate


class LockViewMixin:
    """Lock a class-based view's ``dispatch``; sync and async views alike.

    Set ``lock_key`` (a template or a callable ``(request, **kwargs)``), and optionally
    ``lock_wait``, ``lock_ttl``, ``lock_methods``, ``lock_fail_open``, ``lock_on_busy``
    (``(request, exc) -> response``; a plain function, or a ``staticmethod``) and
    ``lock_scope``: the options of :func:`lock_view`.
    """

    lock_key: ClassVar[str | KeyFunc | None] = None
    lock_wait: ClassVar[Seconds] = UNSET
    lock_ttl: ClassVar[Seconds] = UNSET
    lock_methods: ClassVar[Iterable[str] | None] = None
    lock_fail_open: ClassVar[bool] = False
    lock_on_busy: ClassVar[OnBusy | None] = None
    lock_scope: ClassVar[Scope] = "global"
    _lock_rule: ClassVar[RequestRule | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        from django.views import View

        # A Django view's dispatch does not call super(): one that comes before the
        # mixin's in the MRO (class V(View, LockViewMixin)) leaves every request unlocked.
        for klass in cls.__mro__:
            if klass is LockViewMixin:
                break
            if "dispatch" not in klass.__dict__ or issubclass(klass, LockViewMixin):
                continue
            if issubclass(klass, View):
                raise ConfigError(
                    f"{cls.__qualname__}: {klass.__qualname__}.dispatch comes before "
                    "LockViewMixin's in its bases, so the view would run unlocked; list the "
                    f"mixin first: class {cls.__qualname__}(LockViewMixin, View)"
                )

    @classmethod
    def lock_rule(cls) -> RequestRule:
        """The rule this class's attributes describe, built once per class."""
        rule = cls.__dict__.get("_lock_rule")
        if rule is None:
            if cls.lock_key is None:
                raise ConfigError(f"{cls.__qualname__} uses LockViewMixin but sets no lock_key")
            # Read through __dict__ along the MRO: a plain function set as lock_on_busy is
            # not bound to the view (and a staticmethod is unwrapped).
            on_busy = next(
                (k.__dict__["lock_on_busy"] for k in cls.__mro__ if "lock_on_busy" in k.__dict__),
                None,
            )
            if isinstance(on_busy, staticmethod):
                on_busy = on_busy.__func__
            rule = _rule(
                cls.lock_key,
                wait=cls.lock_wait,
                ttl=cls.lock_ttl,
                methods=cls.lock_methods,
                fail_open=cls.lock_fail_open,
                on_busy=on_busy,
                scope=cls.lock_scope,
            )
            cls._lock_rule = rule
        return rule

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        """``View.dispatch`` under the lock."""
        call = functools.partial(super().dispatch, request, *args, **kwargs)  # type: ignore[misc]
        route = _route(request, type(self).__qualname__)
        if getattr(self, "view_is_async", False):
            return arun_locked(self.lock_rule(), request, kwargs, call, route)
        return run_locked(self.lock_rule(), request, kwargs, call, route)
