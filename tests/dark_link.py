"""The black-holed link scenario the networked stores share: a waiter whose link goes dark
mid-wait, then callers on the dark link, each raising ``BackendUnavailable`` within its
timeout plus one socket (or connect) timeout, never hanging and never returning False."""

from __future__ import annotations

import threading
import time

import pytest

from lockkit_core import BackendUnavailable, LockKit
from lockkit_core.testing import TcpProxy

#: the waiter's timeout, and the one of the second caller
WAIT = 3.0
SHORT = 0.4


def check_a_dark_link_raises_within_its_timeouts(
    far: LockKit, proxy: TcpProxy, key: str, *, socket_timeout: float, reconnect: float
) -> None:
    """``key`` is held elsewhere; ``far`` talks to the store through ``proxy``. A waiter on
    ``far`` is left waiting, the link goes dark, and it must raise within its timeout plus
    ``socket_timeout``; then a non-blocking and a short blocking call, which may need a new
    connection (``reconnect``: the connect timeout) must raise too. The link stays dark."""
    outcome: list[object] = []

    def wait_for_it() -> None:
        start = time.monotonic()
        try:
            outcome.append(far.lock(key, timeout=WAIT).acquire())
        except BackendUnavailable as exc:
            outcome.append(exc)
        outcome.append(time.monotonic() - start)

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    time.sleep(0.4)  # the waiter is waiting
    proxy.partition()
    waiter.join(WAIT + socket_timeout + 3)
    assert not waiter.is_alive(), "the waiter hung on a dark link"
    assert isinstance(outcome[0], BackendUnavailable), outcome
    assert isinstance(outcome[1], float) and outcome[1] <= WAIT + socket_timeout + 0.5
    for attempt in (
        lambda: far.lock(key).acquire(blocking=False),
        lambda: far.lock(key, timeout=SHORT).acquire(),
    ):
        start = time.monotonic()
        with pytest.raises(BackendUnavailable):
            attempt()
        assert time.monotonic() - start <= SHORT + max(socket_timeout, reconnect) + 0.5
