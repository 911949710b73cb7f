"""``LockedTask`` and ``@locked_task``: Celery tasks that do not run twice for one key."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, overload

from celery import Celery, Task, shared_task
from celery.exceptions import Ignore, Reject, Retry
from celery.result import AsyncResult

from lockkit_core import ConfigError
from lockkit_core.config import UNSET, Seconds
from lockkit_core.dedupe import DEFAULTS, RunGuard, TaskKey, check_names, given_options

from .enqueue import HEADER, delay_of, enqueue
from .settings import records_for, resolve
from .typed import TypedTask
from .worker import begin, finish

__all__ = ["LockedTask", "locked_task"]

_GUARD = "lockkit_guard"

P = ParamSpec("P")
R = TypeVar("R")

#: keywords ``@app.task`` takes that are not ``Task`` attributes
_DECORATOR_WORDS = frozenset({
    "base", "bind", "shared", "lazy", "filter", "pydantic", "pydantic_strict",
    "pydantic_context", "pydantic_dump_kwargs", "autoretry_for", "dont_autoretry_for",
    "retry_kwargs", "retry_backoff", "retry_backoff_max", "retry_jitter", "queue",
})  # fmt: skip


class LockedTask(Task):  # type: ignore[misc]
    """A task whose calls are locked by key, at enqueue and while it runs.

    Options are class attributes (``lockkit_key``, ``lockkit_unique_on``, ``lockkit_ttl``,
    ``lockkit_on_duplicate``, ``lockkit_enqueue_lock``, ``lockkit_once``, ``lockkit_wait``,
    ``lockkit_enqueue_ttl``, ``lockkit_remember``, ``lockkit_enabled``), app settings of the
    same names, or per call ``apply_async(lockkit={"once": 600})``. See the package docstring.
    Calling the task as a function (``send_sms(7)``) runs it here, without locks.
    """

    abstract = True
    lockkit_key: str | Callable[..., str] | None = None
    lockkit_unique_on: Iterable[str] | None = None
    lockkit_enabled: Any = UNSET
    lockkit_ttl: Any = UNSET
    lockkit_on_duplicate: Any = UNSET
    lockkit_enqueue_lock: Any = UNSET
    lockkit_once: Any = UNSET
    lockkit_wait: Any = UNSET
    lockkit_enqueue_ttl: Any = UNSET
    lockkit_remember: Any = UNSET
    _lockkit_keys: TaskKey | None = None

    def lockkit_key_for(
        self, args: Any, kwargs: Any, per_call: Mapping[str, Any] | None = None
    ) -> str:
        """The lock key of a call with ``args`` and ``kwargs``."""
        if per_call and per_call.get("key") is not None:
            key = per_call["key"]
            return TaskKey(self.name, self.run, key)(args, kwargs) if callable(key) else key
        keys = self._lockkit_keys
        if keys is None or keys.name != self.name:
            keys = TaskKey(self.name, self.run, self.lockkit_key, self.lockkit_unique_on)
            type(self)._lockkit_keys = keys
        return keys(args, kwargs)

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        shadow: Any = None,
        **options: Any,
    ) -> AsyncResult:
        """Publish the call unless its key is taken; then answer with the task that took it.

        ``lockkit={...}`` overrides options for this call. A duplicate that carries callbacks
        (``link``, ``link_error``, the rest of a chain) or belongs to a group or chord raises
        :class:`TaskLocked` instead: the callbacks cannot join the queued task and the canvas
        already handed out its own result id, so neither is dropped silently.
        """
        per_call = options.pop("lockkit", None)
        headers = dict(options.pop("headers", None) or {})
        parent = super().apply_async

        def publish(tid: str | None, hdrs: dict[str, Any]) -> AsyncResult:
            return parent(args, kwargs, tid, producer, link, link_error, shadow,
                          headers=hdrs, **options)  # fmt: skip

        if HEADER in headers:  # a retry or a deferred copy: it already holds its lock
            return publish(task_id, headers)
        opts = resolve(self, per_call)
        key = self.lockkit_key_for(args, kwargs, per_call) if opts.enabled else ""
        record: dict[str, Any] = {}
        if per_call:  # the worker needs this call's options and key (never a callable)
            record = {"key": key, "opts": {k: v for k, v in per_call.items() if k != "key"}}
        if not opts.enabled or not opts.enqueue_lock:
            return publish(task_id, {**headers, HEADER: record} if record else headers)
        records = records_for(self.app)
        # In a canvas the caller already holds a result id of its own for this step.
        canvas = ("chain", "group_id", "chord")
        callbacks = bool(link or link_error or any(options.get(name) for name in canvas))
        return enqueue(self, records, key, opts, task_id, headers, delay_of(options),
                       lambda tid, hdrs: publish(tid, _merge(hdrs, record)),
                       callbacks=callbacks)  # fmt: skip

    def delay_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """``delay(...)`` once the current Django transaction commits (at once outside one),
        like Celery's ``DjangoTask``. The lock is taken at commit: a duplicate is answered then,
        and a transaction that rolls back publishes nothing and leaves no lock."""
        self.apply_async_on_commit(args, kwargs)

    def apply_async_on_commit(self, *args: Any, **kwargs: Any) -> None:
        """``apply_async(...)`` once the current Django transaction commits (see above)."""
        from django.db import transaction

        transaction.on_commit(functools.partial(self.apply_async, *args, **kwargs))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if request.id is None or request.called_directly:
            return super().__call__(*args, **kwargs)
        headers = request.headers if isinstance(request.headers, dict) else {}
        record = headers.get(HEADER) or {}
        opts = resolve(self, record.get("opts"))
        if not opts.enabled:
            return self.run(*args, **kwargs)
        key = record.get("key") or self.lockkit_key_for(args, kwargs, record.get("opts"))
        guard, answer = begin(self, request, key, opts, records_for(self.app))
        if guard is None:  # a duplicate skipped here: its result is the original's
            return answer
        setattr(request, _GUARD, guard)
        try:
            # The tracer has pushed this request already (Task.__call__ would push another).
            result = self.run(*args, **kwargs)
        except Retry as exc:
            _finish(request, "RETRY", exc)  # Celery skips after_return on a retry
            raise
        except (Ignore, Reject) as exc:
            _finish(request, "IGNORED", exc)
            raise
        guard.succeeded()
        return result

    def after_return(
        self, status: str, retval: Any, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        """Release the task's locks once its result is stored (see :mod:`lockkit_celery.worker`)."""
        _finish(self.request, status, retval)
        super().after_return(status, retval, task_id, args, kwargs, einfo)


def _finish(request: Any, status: str, retval: Any) -> None:
    guard: RunGuard | None = getattr(request, _GUARD, None)
    if guard is not None:
        setattr(request, _GUARD, None)
        finish(guard, status, retval)


def _check_task_options(task_options: dict[str, Any]) -> None:
    """Refuse a keyword that is neither a lock option nor Celery's: it would become a silent
    task attribute (``remeber=60``, ``lockkit_ttl=5``)."""
    unknown = {
        name
        for name in task_options
        if name.startswith("lockkit") or (name not in _DECORATOR_WORDS and not hasattr(Task, name))
    }
    if unknown:
        plain = {n.removeprefix("lockkit_") for n in unknown}
        check_names(plain, "@locked_task")  # a lock option's lockkit_ spelling: name it
        raise ConfigError(
            f"@locked_task got {', '.join(sorted(unknown))}, which is neither a lock option "
            f"({', '.join(DEFAULTS)}, key, unique_on) nor a Celery task option; set a custom "
            "task attribute on a LockedTask subclass and pass it as base="
        )


def _merge(headers: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    if not record:
        return headers
    return {**headers, HEADER: {**headers.get(HEADER, {}), **record}}


# What type checkers see: the task keeps the decorated function's signature (TypedTask).
@overload
def locked_task(fun: Callable[P, R], /) -> TypedTask[P, R]: ...
@overload
def locked_task(
    *,
    key: str | Callable[..., str] | None = None,
    unique_on: Iterable[str] | str | None = None,
    ttl: Seconds = UNSET,
    on_duplicate: Any = UNSET,
    enqueue_lock: Any = UNSET,
    once: Any = UNSET,
    wait: Seconds = UNSET,
    enqueue_ttl: Seconds = UNSET,
    remember: Any = UNSET,
    enabled: Any = UNSET,
    app: Celery | None = None,
    bind: Literal[True],
    **task_options: Any,
) -> Callable[[Callable[Concatenate[Any, P], R]], TypedTask[P, R]]: ...
@overload
def locked_task(
    *,
    key: str | Callable[..., str] | None = None,
    unique_on: Iterable[str] | str | None = None,
    ttl: Seconds = UNSET,
    on_duplicate: Any = UNSET,
    enqueue_lock: Any = UNSET,
    once: Any = UNSET,
    wait: Seconds = UNSET,
    enqueue_ttl: Seconds = UNSET,
    remember: Any = UNSET,
    enabled: Any = UNSET,
    app: Celery | None = None,
    **task_options: Any,
) -> Callable[[Callable[P, R]], TypedTask[P, R]]: ...
def locked_task(
    *args: Any,
    key: str | Callable[..., str] | None = None,
    unique_on: Iterable[str] | str | None = None,
    ttl: Seconds = UNSET,
    on_duplicate: Any = UNSET,
    enqueue_lock: Any = UNSET,
    once: Any = UNSET,
    wait: Seconds = UNSET,
    enqueue_ttl: Seconds = UNSET,
    remember: Any = UNSET,
    enabled: Any = UNSET,
    app: Celery | None = None,
    **task_options: Any,
) -> Any:
    """``@locked_task`` or ``@locked_task(unique_on=["order_id"], once=86400, ...)``.

    Wraps ``app.task`` (with ``app=``) or ``shared_task``; other keyword arguments go to it
    and must be Celery's (a ``Task`` attribute or a keyword of ``@app.task``). A bad lock
    option, an unknown keyword, or a ``key`` template or ``unique_on`` that names a
    non-parameter is a :class:`ConfigError` here, at decoration.
    """
    options = {"ttl": ttl, "on_duplicate": on_duplicate, "enqueue_lock": enqueue_lock,
               "once": once, "wait": wait, "enqueue_ttl": enqueue_ttl, "remember": remember,
               "enabled": enabled}  # fmt: skip
    given = given_options(options)
    _check_task_options(task_options)
    base = task_options.pop("base", LockedTask)
    if not (isinstance(base, type) and issubclass(base, LockedTask)):
        raise ConfigError(f"@locked_task(base=...) must be a LockedTask subclass, got {base!r}")

    def decorate(fun: Callable[..., Any]) -> Any:
        run = functools.partial(fun, None) if task_options.get("bind") else fun
        TaskKey(fun.__qualname__, run, key, unique_on)  # fails now on a bad key or unique_on
        attrs = {f"lockkit_{n}": v for n, v in given.items()}
        factory = app.task if app is not None else shared_task
        return factory(base=base, lockkit_key=key, lockkit_unique_on=unique_on,
                       **attrs, **task_options)(fun)  # fmt: skip

    if len(args) == 1 and callable(args[0]):
        return decorate(args[0])
    if args:
        raise TypeError("use @locked_task or @locked_task(key=..., ...), with keywords only")
    return decorate
