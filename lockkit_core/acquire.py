"""The acquire state machine: attempt, wait to be woken or handed the lock, and decide what a
grant is worth. It decides and never waits nor does I/O (sans-I/O, as h11 and wsproto do).

:func:`plan` is a generator. It yields a step and is sent the step's outcome:

* :data:`ATTEMPT`: one ``try_acquire`` of the key for the caller's owner; send the Grant;
* :data:`REGISTER`: make the waiter (``Backend.waiter()``); send None;
* :class:`Wait`: ``waiter.wait(seconds)``; send its Grant (a hand-over) or None;
* :data:`GIVE_BACK`: release a grant that arrived with its lease over; send None.

It returns :class:`Acquired` or None (busy until the timeout), or raises
:class:`~lockkit_core.errors.BackendUnavailable`. :mod:`lockkit_core.drivers` runs it with
blocking I/O (``Lock.acquire``) and with asyncio (``Lock.aacquire``); closing the waiter and
giving back what a cancelled caller was granted are the drivers' part.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import NamedTuple

from . import lease
from .backends.base import Grant
from .errors import BackendUnavailable

__all__ = [
    "ATTEMPT",
    "GIVE_BACK",
    "REGISTER",
    "Acquired",
    "Attempt",
    "GiveBack",
    "Register",
    "Step",
    "Wait",
    "at_once",
    "dead_on_arrival_error",
    "plan",
]


class Acquired(NamedTuple):
    """A grant worth keeping: its fencing token and the monotonic time its lease ends.
    (A named tuple: made on every acquisition, and a frozen dataclass costs four times more.)"""

    token: int | None
    valid_until: float


class Attempt:
    """Ask the store for the key once."""


class Register:
    """Register to be woken (or handed the key) before the next attempt."""


class GiveBack:
    """Release the grant just received: its lease was over on arrival."""


@dataclass(frozen=True)
class Wait:
    """Wait up to ``seconds`` to be woken or handed the key."""

    seconds: float


ATTEMPT = Attempt()
REGISTER = Register()
GIVE_BACK = GiveBack()
Step = Attempt | Register | Wait | GiveBack
Plan = Generator[Step, Grant | None, Acquired | None]


def at_once(grant: Grant, sent: float, now: float, ttl: float | None) -> Acquired | None:
    """What the first attempt (sent at ``sent``, answered by ``now``) is worth when it needs
    no further step: a fresh grant whose lease is still valid. None: :func:`plan` decides.

    The uncontended acquisition ends here, so the drivers make that attempt themselves and
    start the plan (with ``first=``) only when this says None: the common case then costs
    no generator. It is the plan's own first decision, not a second copy of it."""
    if grant.acquired and grant.since is None:
        valid_until = sent + lease.validity(ttl)
        if now < valid_until:
            return Acquired(grant.token, valid_until)
    return None


def plan(
    key: str,
    ttl: float | None,
    *,
    blocking: bool,
    timeout: float | None,
    queue_first: bool,
    first: tuple[float, Grant] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Plan:
    """The decisions of one acquisition of ``key``; None only if someone else held it until
    ``timeout``.

    A grant this call obtains is kept whenever its lease is still valid, even if the round
    trip outlasted ``timeout``: None would tell the caller the key is busy, and it is not.
    A grant whose lease is over on arrival is given back and asked for again; after
    up to :data:`~lockkit_core.lease.MAX_DEAD_ON_ARRIVAL` of them in one call (or when the caller's
    time is up) :class:`BackendUnavailable` names the round trip and the ttl, rather than
    spinning. ``queue_first``: register before the first attempt (``Backend.queue_first``).
    ``first``: the ``(sent, grant)`` of a first attempt the driver already made (see
    :func:`at_once`); the timeout then counts from when it was sent.
    """
    deadline = None if timeout is None else (clock() if first is None else first[0]) + timeout
    registered = False
    dead_on_arrival = 0
    slowest = 0.0
    if blocking and queue_first and first is None:
        yield REGISTER
        registered = True
    while True:
        if first is not None:
            sent, grant = first
            first = None
        else:
            sent = clock()
            answer = yield ATTEMPT
            assert answer is not None  # an attempt always answers
            grant = answer
        while True:
            now = clock()
            if grant.acquired:
                if grant.since is not None:
                    sent = grant.since
                    if ttl is not None and now - sent > ttl / 10:
                        # Handed over long after we queued: confirm, so the lease
                        # is measured from a recent request, not from the queueing.
                        break
                valid_until = sent + lease.validity(ttl)
                if now < valid_until:
                    return Acquired(grant.token, valid_until)
                assert ttl is not None  # a grant without a lease never arrives dead
                yield GIVE_BACK
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
            if not registered:
                # Register before the next attempt so a release in between wakes us.
                yield REGISTER
                registered = True
                break
            handed = yield Wait(lease.next_wait(grant.retry_after, remaining))
            if handed is None:
                break
            grant = handed
        if not blocking or (deadline is not None and clock() >= deadline):
            break
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
