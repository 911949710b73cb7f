"""redis:// read-write locks and semaphores: what an uncontended place costs the server, and
the stored layout it leaves (nothing, once released)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from lockkit_core import LockKit
from lockkit_core.shared import SharedLock
from lockkit_core.testing import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def kit(redis_server: RedisServer) -> Iterator[LockKit]:
    with LockKit(redis_server.url, namespace=f"rp{uuid.uuid4().hex[:8]}") as made:
        yield made


def _sent(raw: redis.Redis, work: Callable[[], None]) -> list[str]:
    """The commands clients sent the server while ``work`` ran (MONITOR; commands run inside
    scripts are left out)."""
    seen: list[str] = []
    marker = f"end-{uuid.uuid4().hex}"
    with raw.monitor() as monitor:
        raw.echo("start")  # the monitor is attached once it reports this
        for event in monitor.listen():
            if "start" in event["command"]:
                break
        work()
        raw.echo(marker)
        for event in monitor.listen():
            if marker in event["command"]:
                break
            if event.get("client_type") != "lua":
                seen.append(event["command"])
    return seen


@pytest.mark.parametrize(
    "place",
    [
        lambda kit: kit.semaphore("jobs", 3),
        lambda kit: kit.rwlock("doc").read(),
        lambda kit: kit.rwlock("doc").write(),
    ],
    ids=["semaphore", "read", "write"],
)
def test_an_uncontended_place_costs_two_round_trips(
    kit: LockKit, redis_server: RedisServer, place: Callable[[LockKit], SharedLock]
) -> None:
    raw = redis.Redis.from_url(redis_server.url)
    with place(kit):  # the first use loads the script and opens the connection
        pass

    def cycle() -> None:
        with place(kit) as held:
            assert held.token is not None

    sent = _sent(raw, cycle)
    # one script call to take the place, one to give it back
    assert len(sent) == 2 and all(command.startswith("EVALSHA") for command in sent), sent
    assert [k for k in raw.scan_iter(match=f"lockkit:{{{kit.namespace}:*") if b":f" not in k] == []
