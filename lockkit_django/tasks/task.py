"""``@locked_task`` and ``LockedTask``: Django ``@task`` functions that do not run twice for
one key."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

from asgiref.sync import sync_to_async

from lockkit_core import ConfigError
from lockkit_core.config import UNSET, Seconds
from lockkit_core.dedupe import TaskKey, TaskOptions, decide, given_options

from ..conf import lockkit_state
from .compat import GenericTask, Task, TaskResult, task
from .enqueue import enqueue_locked
from .worker import call_in_worker

__all__ = ["LockedTask", "TaskLock", "locked_task"]

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class TaskLock:
    """What ``@locked_task`` said: the call's key builder and the options it was given."""

    keys: TaskKey
    given: tuple[tuple[str, Any], ...] = ()

    def options(self) -> TaskOptions:
        """The options decided now (``settings.LOCKKIT`` may have changed since import)."""
        state = lockkit_state()
        return decide(dict(self.given), state.settings.tasks, state.kit.config.ttl,
                      where="@locked_task")  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class LockedTask(GenericTask[P, T], Generic[P, T]):
    """A ``django.tasks`` task whose calls are locked by key, when enqueued and while run.

    Made by :func:`locked_task`; ``.using(...)`` keeps the locks. ``enqueue()`` of a call
    whose key is queued or running returns that task's result (same id) instead of queueing
    another; ``call()`` in a worker runs under the locks (see :mod:`lockkit_django.tasks`).
    """

    lockkit: TaskLock

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult[T]:
        """Queue the call, or return the result of the same call already queued or running."""
        opts = self.lockkit.options()
        if not opts.enabled or not opts.enqueue_lock:
            return Task.enqueue(self, *args, **kwargs)
        key = self.lockkit.keys(args, kwargs)
        return enqueue_locked(self, opts, key, tuple(args), dict(kwargs))

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult[T]:
        """:meth:`enqueue` from async code (in a thread: the lock store may block)."""
        return await sync_to_async(self.enqueue, thread_sensitive=False)(*args, **kwargs)

    def call(self, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run the function; in a worker, under the call's locks."""
        keys = self.lockkit.keys
        return call_in_worker(  # type: ignore[no-any-return]
            self,
            self.lockkit.options(),
            lambda a, kw: keys(a[1:] if self.takes_context else a, kw),
            tuple(args),
            dict(kwargs),
            lambda *a, **kw: Task.call(self, *a, **kw),
        )

    async def acall(self, *args: P.args, **kwargs: P.kwargs) -> T:
        """:meth:`call` from async code."""
        return await sync_to_async(self.call, thread_sensitive=False)(*args, **kwargs)


def locked_task(
    function: Any = None,
    *,
    key: str | Callable[..., str] | None = None,
    unique_on: Iterable[str] | str | None = None,
    ttl: Seconds = UNSET,
    on_duplicate: Any = UNSET,
    once: Any = UNSET,
    wait: Seconds = UNSET,
    enqueue_lock: Any = UNSET,
    enqueue_ttl: Seconds = UNSET,
    remember: Any = UNSET,
    enabled: Any = UNSET,
    **task_options: Any,
) -> Any:
    """``@locked_task`` or ``@locked_task(unique_on=["order_id"], once=3600, priority=...)``
    in place of ``@task``, or stacked over it (``@locked_task(...)`` above ``@task(...)``).

    Keywords other than the lock options go to ``@task`` (``priority``, ``queue_name``,
    ``backend``, ``takes_context``). A bad option, or a ``key``/``unique_on`` naming a
    parameter the function does not take, is a :class:`ConfigError` here, at import.
    """
    given = {"ttl": ttl, "on_duplicate": on_duplicate, "once": once, "wait": wait,
             "enqueue_lock": enqueue_lock, "enqueue_ttl": enqueue_ttl, "remember": remember,
             "enabled": enabled}  # fmt: skip
    checked = tuple(given_options(given).items())

    def decorate(target: Any) -> LockedTask[Any, Any]:
        if isinstance(target, LockedTask):
            raise ConfigError(f"task {target.name} is locked twice: use one @locked_task")
        if isinstance(target, Task):
            if task_options:
                raise ConfigError(
                    f"@locked_task over @task takes only lock options; pass "
                    f"{', '.join(sorted(task_options))} to @task"
                )
            made = target
        elif callable(target):
            made = task(**task_options)(target)
        else:
            raise TypeError(f"@locked_task decorates a function or a Task, got {target!r}")
        run = made.func
        if made.takes_context:  # the key is built from the call, not the context
            params = list(inspect.signature(run).parameters.values())[1:]
            run = _without_context(run, inspect.Signature(params))
        keys = TaskKey(made.module_path, run, key, unique_on)  # fails now on a bad key
        return LockedTask(
            func=made.func,
            priority=made.priority,
            backend=made.backend,
            queue_name=made.queue_name,
            run_after=made.run_after,
            takes_context=made.takes_context,
            lockkit=TaskLock(keys, checked),
        )

    if function is not None:
        return decorate(function)
    return decorate


def _without_context(func: Callable[..., Any], signature: inspect.Signature) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        return func(None, *args, **kwargs)

    run.__signature__ = signature  # type: ignore[attr-defined]
    return run
