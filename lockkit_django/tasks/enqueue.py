"""The enqueueing side: claim the call's key, then queue it; a duplicate gets the queued one.

::

    web 1: send_sms.enqueue(order_id=7) -> takes <key> -> the backend stores result R
                                        -> writes the id record of R
    web 2: send_sms.enqueue(order_id=7) -> <key> is held -> reads R -> get_result(R)

The claim and the duplicate answer are the core's (:mod:`lockkit_core.dedupe`). What travels
to the worker in the call's keyword arguments, under :data:`HIDDEN`, is a random nonce, not
the lock's owner token: the owner is an HMAC of the key and the nonce under ``SECRET_KEY``
(:func:`owner_of`), so reading the task table does not let anyone release or adopt the lock.
The worker takes :data:`HIDDEN` out before the function runs, and results handed back here
leave it out. A backend that fails to queue gives the key back. Unlike Celery, the backend
chooses the result id, so a duplicate that comes while the first call is between its claim
and its ``id`` record record waits up to :data:`SETTLE` seconds for it.

A backend that cannot look results up from another process (django-tasks' ``DummyBackend``,
``ImmediateBackend``) answers a duplicate from its own results when it has the original, and
otherwise with a stand-in :class:`TaskResult` whose ``id`` is the original's (status
``READY``; it cannot be refreshed there).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import hmac
import logging
import secrets
import time
from typing import Any, Final

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from lockkit_core.dedupe import Claim, Duplicate, TaskOptions, TaskRecords, claim_key

from ..conf import lockkit_state
from .compat import Task, TaskResult, TaskResultDoesNotExist
from .signals import report_duplicate

__all__ = ["HIDDEN", "SETTLE", "enqueue_locked", "owner_of", "records", "without_hidden"]

log = logging.getLogger("lockkit.django.tasks")

#: The keyword argument that carries the lock's nonce from the enqueuing process to the worker.
HIDDEN: Final = "_lockkit"
#: Seconds a duplicate waits for the first call's result id (record, then result row).
SETTLE: Final = 5.0


def owner_of(key: str, nonce: str) -> str:
    """The owner token of ``key`` for the call that carries ``nonce``: an HMAC under
    ``SECRET_KEY``, computed alike where the call is enqueued and where it runs. A project
    without a ``SECRET_KEY`` (a script's ``settings.configure()``) gets an unkeyed hash, and
    a warning: then the nonce in the task row is enough to release the lock."""
    try:
        secret = str(settings.SECRET_KEY).encode()
    except ImproperlyConfigured:
        _warn_no_secret()
        secret = b""
    message = f"lockkit-task-owner|{key}|{nonce}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()[:32]


@functools.cache
def _warn_no_secret() -> None:
    log.warning(
        "lockkit: settings.SECRET_KEY is empty, so the owner of a task's lock is derived "
        "without a secret and anyone who reads the task table can release it; set SECRET_KEY"
    )


def records() -> TaskRecords:
    """The task records on the project's lock store."""
    return TaskRecords(lockkit_state().kit, "settings.LOCKKIT['URL']")


def without_hidden(result: TaskResult[Any]) -> TaskResult[Any]:
    """``result`` without :data:`HIDDEN` in its ``kwargs``."""
    if HIDDEN not in result.kwargs:
        return result
    kwargs = {k: v for k, v in result.kwargs.items() if k != HIDDEN}
    clean = dataclasses.replace(result, kwargs=kwargs)
    object.__setattr__(clean, "_return_value", result._return_value)
    return clean


def _delay(task: Task[Any, Any]) -> float:
    if task.run_after is None:
        return 0.0
    now = datetime.datetime.now(task.run_after.tzinfo)
    seconds: float = (task.run_after - now).total_seconds()
    return max(0.0, seconds)


def _stand_in(task: Any, original: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A result naming ``original`` for a backend that cannot look it up."""
    fields = {f.name for f in dataclasses.fields(TaskResult)}
    values: dict[str, Any] = {
        "task": task, "id": original, "status": "READY", "enqueued_at": None,
        "started_at": None, "finished_at": None, "last_attempted_at": None, "args": list(args),
        "kwargs": kwargs, "backend": task.backend, "errors": [], "worker_ids": [],
    }  # fmt: skip
    return TaskResult(**{k: v for k, v in values.items() if k in fields})


def _answer(task: Any, dup: Duplicate, opts: TaskOptions, call: tuple[Any, Any]) -> Any:
    if opts.on_duplicate == "raise" or dup.original is None:
        raise dup.error()
    backend = task.get_backend()
    deadline = time.monotonic() + SETTLE
    while True:
        try:
            return without_hidden(backend.get_result(dup.original))
        except NotImplementedError:
            return _stand_in(task, dup.original, *call)
        except TaskResultDoesNotExist:
            if not backend.supports_get_result:  # another thread's or process's result
                return _stand_in(task, dup.original, *call)
            if time.monotonic() >= deadline:
                raise dup.error(
                    "its result is not visible here yet (was it enqueued in a transaction "
                    "that has not committed? enqueue through transaction.on_commit)"
                ) from None
            time.sleep(0.02)


def enqueue_locked(
    task: Any, opts: TaskOptions, key: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> TaskResult[Any]:
    """Queue the call under its key, or answer with the task that holds the key."""
    store = records()
    nonce = secrets.token_hex(16)
    claim = claim_key(store, task.name, key, opts.enqueue_ttl + _delay(task),
                      once=opts.once is not None, derived=False, settle=SETTLE,
                      owner=owner_of(key, nonce))  # fmt: skip
    if isinstance(claim, Duplicate):
        report_duplicate(task, claim, opts.on_duplicate, store.kit.labels)
        if claim.reason == "enqueued" and opts.on_duplicate == "retry":
            return without_hidden(Task.enqueue(task, *args, **kwargs))  # the worker waits
        return _answer(task, claim, opts, (args, kwargs))  # type: ignore[no-any-return]
    return _queue(task, claim, nonce, args, kwargs)


def _queue(
    task: Any, claim: Claim, nonce: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> TaskResult[Any]:
    result = None
    try:
        result = Task.enqueue(task, *args, **kwargs, **{HIDDEN: {"nonce": nonce}})
        claim.name_task(str(result.id))
    except BaseException:
        claim.give_back(None if result is None else str(result.id))
        raise
    return without_hidden(result)
