"""The acquire loop: attempt, wait to be woken or handed the lock, and decide what a grant is worth.

It speaks only to a :class:`~lockkit_core.backends.base.Backend` and its
:class:`~lockkit_core.backends.base.Waiter`; reentrancy, renewal and handles live elsewhere.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from . import lease
from .backends.base import Backend, Grant, Waiter
from .errors import BackendError, BackendUnavailable

__all__ = ["Acquired", "acquire", "give_back"]

log = logging.getLogger("lockkit")


@dataclass(frozen=True)
class Acquired:
    """A grant worth keeping: its fencing token and the monotonic time its lease ends."""

    token: int | None
    valid_until: float


def acquire(
    backend: Backend,
    full_key: str,
    key: str,
    owner: str,
    ttl: float,
    *,
    fair: bool,
    blocking: bool,
    timeout: float | None,
    adopted: bool,
) -> Acquired | None:
    """Take ``full_key`` for ``owner``; None if it stayed busy until ``timeout``.

    Raises :class:`BackendUnavailable` if the store cannot be reached, or if every grant
    arrives with its lease already over (the link is slower than the ttl).
    """
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    waiter: Waiter | None = None
    acquired = False
    reachable = True
    too_slow: float | None = None
    try:
        if blocking and backend.queue_first():
            waiter = backend.waiter(full_key, owner, fair)
        while True:
            sent = time.monotonic()
            grant: Grant = backend.try_acquire(full_key, owner, ttl)
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
                        if not adopted:  # an adopted lease is not ours to give back
                            give_back(backend, full_key, owner)
                        if now >= valid_until:
                            too_slow = now - sent
                        else:
                            return None
                    else:
                        acquired = True
                        return Acquired(grant.token, valid_until)
                if not blocking:
                    break
                remaining = None if deadline is None else deadline - now
                if remaining is not None and remaining <= 0:
                    break
                if waiter is None:
                    # Register before the next attempt so a release in between wakes us.
                    waiter = backend.waiter(full_key, owner, fair)
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
            f"the grant of {key!r} took {too_slow:.3f} s to arrive, past its "
            f"{ttl:g} s lease; the link to the store is slower than the TTL"
        )
    return None


def give_back(backend: Backend, full_key: str, owner: str) -> None:
    """Release a grant we will not use; if that fails it expires by its TTL."""
    try:
        backend.release(full_key, owner)
    except BackendError:
        log.warning("could not give back a late grant of %s; it expires by TTL", full_key)
