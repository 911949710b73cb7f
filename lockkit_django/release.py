"""What ends a request's lock in Django: the response's ``close``, which the handler calls
after the request's transaction (``ATOMIC_REQUESTS``) has committed or rolled back, so the
next request sees the data and a rollback frees the lock as surely as a commit.

:func:`after_commit` is for work that must follow a commit (the idempotency layer's record).
"""

from __future__ import annotations

import functools
import weakref
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
    """Release when the response is closed: Django's handler (and its test client) closes
    every response after the view's transaction committed or rolled back, and a server
    closes a stream when its bytes are sent or the client goes away. A response a later
    middleware replaces is never closed: it releases when it is dropped."""
    # No strong reference from the wrapper back to the response: that cycle would keep a
    # replaced response (and the lock) alive until the garbage collector runs.
    own = response.__dict__.get("close")  # a wrapper set on this response before ours
    ref = weakref.ref(response)

    def close_then_release() -> None:
        try:
            if own is not None:
                own()
            elif (live := ref()) is not None:
                type(live).close(live)
        finally:
            release()

    # An instance attribute: the lock must not outlive the bytes it protects.
    response.close = close_then_release  # type: ignore[method-assign]
    # The finalizer holds ``release``, not the response; ``release`` runs at most once.
    weakref.finalize(response, release)
    return response
