"""Lease arithmetic, kept free of I/O so it can be tested with a fake clock."""

from __future__ import annotations

import math

__all__ = [
    "MAX_DEAD_ON_ARRIVAL",
    "MIN_TTL",
    "next_wait",
    "on_store",
    "renew_at",
    "renew_interval",
    "retry_interval",
    "validity",
]

#: part of a lease we never count on, for clock drift between us and the store
DRIFT_FACTOR = 0.01
DRIFT_FLOOR = 0.002
#: The shortest ttl accepted. The drift margin takes 1% + 2 ms of every lease, so a 10 ms
#: lease leaves 7.9 ms of validity: room for a loopback round trip (0.05-0.2 ms) and a
#: scheduler hiccup, with the watchdog renewing every 3.3 ms. Below that the margin eats
#: most of the lease (at 2.02 ms, all of it) and a grant would often arrive already void.
MIN_TTL = 0.01
#: grants in a row that may arrive with their lease already over before the acquire loop
#: gives up with BackendUnavailable instead of asking again (the link is slower than the ttl)
MAX_DEAD_ON_ARRIVAL = 3
#: how long to wait between attempts when the store gives no hint
DEFAULT_WAIT = 0.25
MIN_WAIT = 0.001


def on_store(ttl: float | None) -> float:
    """The ttl a backend is given: ``math.inf`` for a lock without a lease (``ttl=None``),
    which only backends declaring ``Capability.NO_LEASE`` ever receive."""
    return math.inf if ttl is None else ttl


def validity(ttl: float | None) -> float:
    """How long after *sending* the request we may trust a lease of ``ttl`` seconds; for ever
    (``math.inf``) with no lease (``ttl=None``)."""
    if ttl is None:
        return math.inf
    return ttl - (ttl * DRIFT_FACTOR + DRIFT_FLOOR)


def renew_interval(ttl: float) -> float:
    """The watchdog extends every ttl/3, so two extensions in a row may fail before loss."""
    return ttl / 3.0


#: renewals are due on a grid of ttl/RENEW_GRID: holds taken close together share a wake-up
RENEW_GRID = 12


def renew_at(now: float, ttl: float) -> float:
    """When to renew a lease of ``ttl`` seconds obtained at ``now``: :func:`renew_interval`
    later, rounded down to a multiple of ``ttl / RENEW_GRID``, so between ttl/4 and ttl/3.
    Every acquisition in one such step is then renewed (or found released) at one wake-up of
    the watchdog, not one each; early is safe, late would not be."""
    step = ttl / RENEW_GRID
    return math.floor((now + renew_interval(ttl)) / step) * step


def retry_interval(ttl: float) -> float:
    """After a failed extension, try again this soon (bounded to 50 ms .. 1 s)."""
    return min(1.0, max(0.05, ttl / 10.0))


def next_wait(retry_after: float | None, remaining: float | None) -> float:
    """Seconds to wait before the next attempt.

    ``retry_after`` is the holder's remaining lease (the longest we need to wait even if no
    release notice ever arrives); ``remaining`` is what is left of the caller's timeout.
    """
    wait = DEFAULT_WAIT if retry_after is None else max(MIN_WAIT, retry_after)
    if remaining is not None:
        wait = min(wait, remaining)
    return max(0.0, wait)
