"""What ends a request's lock in Django: the response's ``close`` for a stream, the commit
under ``ATOMIC_REQUESTS``, or the view's return.

Inside a transaction the lock is released after the commit (``transaction.on_commit``), so
the next request sees the data. If the commit itself fails, Django drops the callback and the
handle with it: the core stops renewing a dropped hold, so it frees within its ttl.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpResponseBase

__all__ = ["after_commit", "release_with"]


def after_commit(callback: Callable[[], None]) -> None:
    """Run ``callback`` now, or once every transaction open on any database has committed
    (``ATOMIC_REQUESTS``). On a rollback it never runs."""
    # Only connections this thread has opened can be inside a transaction.
    atomic = [c.alias for c in connections.all(initialized_only=True) if _in_atomic_block(c)]
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


def _in_atomic_block(conn: BaseDatabaseWrapper) -> bool:
    return bool(conn.connection is not None and conn.in_atomic_block)


def release_with(response: HttpResponseBase, release: Callable[[], None]) -> HttpResponseBase:
    """Hand ``release`` to whatever ends the request: a stream's close, the commit, or now."""
    if not response.streaming:
        after_commit(release)
        return response
    close = response.close

    def close_then_release() -> None:
        try:
            close()
        finally:
            release()

    # An instance attribute: the server calls response.close() when the stream ends or the
    # client goes away; the lock must not outlive the bytes it protects.
    response.close = close_then_release  # type: ignore[method-assign]
    return response
