"""Helpers of the asyncio tests: what a key left on its store, and how long a loop stalled."""

from __future__ import annotations

import asyncio
import gc
import os
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import pytest

from lockkit_core import LockKit
from lockkit_core.backends.file.record import file_name
from lockkit_core.backends.file.store import peek
from lockkit_core.keys import namespaced

T = TypeVar("T")

#: the stores with an asyncio API, as ``store_url`` parameters
ASYNC_STORES = [
    "memory",
    "file",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("zookeeper", marks=pytest.mark.zookeeper),
    pytest.param("etcd", marks=pytest.mark.etcd),
    pytest.param("postgresql", marks=pytest.mark.postgresql),
    pytest.param("mysql", marks=pytest.mark.mysql),
    "sqlite",
]


@pytest.fixture(params=ASYNC_STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each kind that has an asyncio API (redis:// on the session server)."""
    if request.param == "memory":
        return f"memory://async-{uuid.uuid4().hex[:12]}"
    if request.param == "file":
        return f"file://{tmp_path / 'locks'}"
    if request.param == "zookeeper":
        zookeeper = request.getfixturevalue("zookeeper_server")
        return str(zookeeper.url) + "?session_timeout=4&socket_timeout=2"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'locks.db'}"
    if request.param == "postgresql":
        postgres = request.getfixturevalue("postgres_server")
        return str(postgres.url) + "?socket_timeout=5&connect_timeout=2"
    if request.param == "mysql":
        mariadb = request.getfixturevalue("mariadb_server")
        return str(mariadb.url) + "?socket_timeout=5&connect_timeout=2"
    if request.param == "etcd":
        etcd = request.getfixturevalue("etcd_server")
        return str(etcd.url) + "?socket_timeout=2"
    server = request.getfixturevalue("redis_server")
    return str(server.url) + "?socket_timeout=2&socket_connect_timeout=2"


def leftovers(kit: LockKit, key: str) -> list[str]:
    """What ``key`` still has on the store (a holder, queue entries), read from the store
    itself; empty when it is free and nobody is queued."""
    full_key = namespaced(kit.namespace, key)
    found: list[str] = []
    if kit.backend.info(full_key) is not None:
        found.append("a holder")
    scheme = kit.backend.url.scheme
    if scheme == "memory":
        entry = kit.backend._store.entries.get(full_key)  # type: ignore[attr-defined]
        if entry is not None and (entry.waiters or entry.queue or entry.wakers):
            found.append(f"{entry.waiters} waiter(s), {len(entry.queue)} queued")
    elif scheme == "file":
        record = peek(os.path.join(kit.backend.directory, file_name(full_key)))  # type: ignore[attr-defined]
        if record is not None and record.queue:
            found.append(f"{len(record.queue.splitlines())} queue entries")
    elif scheme == "redis":
        client = kit.backend.client  # type: ignore[attr-defined]
        for name in client.keys(f"lockkit:{{{full_key}}}*"):
            # the record is the holder, counted above; the fence counter is kept on purpose
            if name != f"lockkit:{{{full_key}}}".encode() and not name.endswith(b":f"):
                found.append(f"redis key {name.decode()} ({client.type(name).decode()})")
    elif scheme == "mysql":
        # asyncio waiters queue in the process, in rooms per loop (backends/sql/myaio.py)
        for ops in kit.backend._aio._made.values():  # type: ignore[attr-defined]
            if full_key in ops.rooms:
                found.append(f"{len(ops.rooms[full_key].turns)} waiter(s) in the room")
    elif scheme == "zookeeper":
        tree = kit.backend.tree  # type: ignore[attr-defined]
        children = kit.backend.session.run(tree.children(full_key))  # type: ignore[attr-defined]
        if len(children) > len(found):
            found.append(f"{len(children) - len(found)} queue node(s)")
    elif scheme == "etcd":
        from lockkit_core.backends.etcd.client import b64
        from lockkit_core.backends.etcd.layout import prefix_end, queue_prefix

        queue = queue_prefix(full_key)
        answer = kit.backend.client.call(  # type: ignore[attr-defined]
            "kv/range",
            {"key": b64(queue), "range_end": b64(prefix_end(queue)), "count_only": True},
            "count the queue",
        )
        if int(answer.get("count", 0)):
            found.append(f"{answer['count']} queue entries")
    return found


def _queued_for_a_cpu() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (Linux's schedstat
    ``run_delay``), or 0.0 where the kernel does not say."""
    try:
        with open("/proc/thread-self/schedstat") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


async def worst_stall(work: Awaitable[T], tick: float = 0.01) -> tuple[T, float]:
    """Await ``work`` while a ticker on the same loop sleeps ``tick`` at a time; return its
    result and the longest any tick overran (seconds): how long the loop was blocked.

    A tick's overrun leaves out the time the loop's thread was ready to run but queued for a
    CPU: on a loaded machine other processes take tens of milliseconds from it now and then,
    which says nothing about the loop. A loop blocked in a call (a socket read, a lock, a
    sleep) is not queued for a CPU, so that time counts in full."""
    worst = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal worst
        last, last_queued = time.monotonic(), _queued_for_a_cpu()
        while not done.is_set():
            await asyncio.sleep(tick)
            now, queued = time.monotonic(), _queued_for_a_cpu()
            worst = max(worst, now - last - tick - (queued - last_queued))
            last, last_queued = now, queued

    # What earlier tests left for the collector is not ours to measure: collect it first.
    gc.collect()
    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker starts first
    try:
        result = await work
    finally:
        done.set()
        await ticking
    return result, worst
