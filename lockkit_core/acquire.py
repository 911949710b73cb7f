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

__all__ = ["Acquired", "acquire", "dead_on_arrival_error", "give_back"]

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
    ttl: float | None,
    *,
    fair: bool,
    blocking: bool,
    timeout: float | None,
) -> Acquired | None:
    """Take ``full_key`` for ``owner``; None only if someone else held it until ``timeout``.

    A grant this call obtains is kept whenever its lease is still valid, even if the round
    trip outlasted ``timeout``: False would tell the caller the key is busy, and it is not.
    A grant whose lease is over on arrival is given back and asked for again; after
    up to :data:`~lockkit_core.lease.MAX_DEAD_ON_ARRIVAL` of them in one call (or when the caller's
    time is up) :class:`BackendUnavailable` names the round trip and the ttl, rather than
    spinning. It is raised too when the store cannot be reached, never turned into None.
    """
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    waiter: Waiter | None = None
    acquired = False
    reachable = True
    dead_on_arrival = 0
    slowest = 0.0
    try:
        if blocking and backend.queue_first():
            waiter = backend.waiter(full_key, owner, fair)
        while True:
            sent = time.monotonic()
            grant: Grant = backend.try_acquire(full_key, owner, lease.on_store(ttl))
            while True:
                now = time.monotonic()
                if grant.acquired:
                    if grant.since is not None:
                        sent = grant.since
                        if ttl is not None and now - sent > ttl / 10:
                            # Handed over long after we queued: confirm, so the lease
                            # is measured from a recent request, not from the queueing.
                            break
                    valid_until = sent + lease.validity(ttl)
                    if now < valid_until:
                        acquired = True
                        return Acquired(grant.token, valid_until)
                    assert ttl is not None  # a grant without a lease never arrives dead
                    give_back(backend, full_key, owner)
                    dead_on_arrival += 1
                    slowest = max(slowest, now - sent)
                    if dead_on_arrival >= lease.MAX_DEAD_ON_ARRIVAL:
                        raise dead_on_arrival_error(key, ttl, slowest, dead_on_arrival)
                    if blocking:
                        break  # we gave the key back ourselves: ask again at once
                if not blocking:
                    break
                remaining = None if deadline is None else deadline - now
                if remaining is not None and remaining <= 0:
                    break
                if waiter is None:
                    # Register before the next attempt so a release in between wakes us.
                    waiter = backend.waiter(full_key, owner, fair)
                    break
                handed = waiter.wait(lease.next_wait(grant.retry_after, remaining))
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
    if dead_on_arrival and ttl is not None:
        raise dead_on_arrival_error(key, ttl, slowest, dead_on_arrival)
    return None


def dead_on_arrival_error(key: str, ttl: float, took: float, grants: int) -> BackendUnavailable:
    """The error for grants whose lease was over before their answer arrived."""
    return BackendUnavailable(
        f"{grants} grant(s) of {key!r} arrived with their lease already over: the round "
        f"trip to the store took {took:.3f} s, past the usable part of the {ttl:g} s ttl "
        "(the link to the store is slower than the TTL); raise the ttl well above the "
        "round trip, or fix the link"
    )


def give_back(backend: Backend, full_key: str, owner: str) -> None:
    """Release a grant we will not use; if the store refuses, it expires by its TTL.

    :class:`BackendUnavailable` propagates: the next attempt would only spend another
    socket timeout of the caller's on a store that cannot be reached.
    """
    try:
        backend.release(full_key, owner)
    except BackendUnavailable:
        raise
    except BackendError:
        log.warning("could not give back a late grant of %s; it expires by TTL", full_key)
