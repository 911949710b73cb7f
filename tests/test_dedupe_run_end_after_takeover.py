"""A run that ends after its run record expired and a redelivered copy began: both copies
adopted the call's key with the same owner token (it travels in the task's headers), so the
late end must not free the key under the copy that now runs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockkit_core import LockKit
from lockkit_core.lock import new_owner_token
from lockkit_core.testing import RedisServer


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis), "file"])
def kit(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LockKit]:
    """redis:// (one script call each: lua/runs.lua) and file:// (the Backend defaults)."""
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        url = server.url
    else:
        url = f"file://{tmp_path / 'locks'}"
    kit = LockKit(url, namespace=f"t{uuid.uuid4().hex[:8]}", ttl=10)
    try:
        yield kit
    finally:
        kit.close()


def test_a_late_end_of_a_taken_over_run_leaves_the_new_copys_key_held(kit: LockKit) -> None:
    backend = kit.backend
    run, key = f"{kit.namespace}:run:t1", f"{kit.namespace}:call"
    owner = new_owner_token()  # the producer's, in the task's headers: both copies adopt it
    assert backend.try_acquire(key, owner, 5).acquired
    first_run = new_owner_token()
    ran, kept = backend.begin_run(run, first_run, key, owner, 0.3)
    assert ran.acquired and kept.acquired
    # The first copy stalls: its run record expires, while its key lease (the same ttl,
    # renewed a moment later by the same watchdog) is still alive.
    assert backend.extend(key, owner, 5)
    time.sleep(0.5)
    assert backend.info(run) is None
    second_run = new_owner_token()
    ran2, kept2 = backend.begin_run(run, second_run, key, owner, 5)
    assert ran2.acquired and kept2.acquired, "the redelivered copy runs now"
    # The first copy wakes up and ends its run, its run record guarding the key's release.
    answers = backend.end_run([(key, owner)], guard=(run, first_run, 5.0))
    assert answers == [False, False], "its run record is the second copy's"
    assert backend.info(key) is not None, (
        f"the late end of the first copy freed the key the second copy runs under ({answers})"
    )
    assert backend.end_run([(key, owner)], guard=(run, second_run, 5.0)) == [True, True]
    assert backend.info(key) is None and backend.info(run) is None
