"""``python -m benchmarks.async_waiters [--waiters 10,1000] [--stores redis,zookeeper,etcd]``.

Many asyncio tasks of one process wait on one key; then the holder lets go and the lock passes
down the whole queue, each task releasing it as soon as it has it. Each (store, waiter count)
runs in a fresh child process, so its peak RSS is its own. Reported per run:

* peak RSS of the child (``ru_maxrss``) and its growth over the 10-waiter run: a thread per
  waiter would cost a stack each (8 MiB of address space, tens of KiB resident);
* OS threads of the child before the tasks start and while they all wait (``/proc``);
* store round trips while the queue drains, per hand-over: on redis every command a client
  sent (``MONITOR``, scripts' inner commands left out, see :mod:`benchmarks.redis_monitor`);
  on ZooKeeper the requests the server received (its ``mntr`` packet counter, which also
  counts the session's pings, so it is an upper bound); on etcd the gRPC messages the member
  received (its ``/metrics``: the JSON gateway's requests, and each message of a stream, such as
  a watch's create and a lease's keep-alive), by method.

The counting brackets only the drain: the child says when every waiter is queued, the parent
starts counting and tells it to go, the child says when the last task is done.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lockkit_core import LockKit

__all__ = ["main"]

KEY = "hot"


def os_threads() -> int:
    """OS threads of this process (Python's and the drivers' own)."""
    return len(os.listdir("/proc/self/task"))


def queued(kit: LockKit) -> int:
    """How many waiters the store shows queued on :data:`KEY` (on etcd, this loop's line)."""
    full_key = f"{kit.namespace}:{KEY}"
    scheme = kit.backend.url.scheme
    if scheme == "redis":
        return int(kit.backend.client.zcard(f"lockkit:{{{full_key}}}:q"))  # type: ignore[attr-defined]
    if scheme == "zookeeper":
        backend: Any = kit.backend
        return len(backend.session.run(backend.tree.children(full_key))) - 1
    if scheme == "etcd":
        # asyncio waiters of one process stand in a line on the loop; only its front is in
        # the store's queue (see lockkit_core/backends/etcd/line.py)
        line = kit.backend.aio().lines.get(full_key)  # type: ignore[attr-defined]
        return len(line.places) if line is not None else 0
    raise ValueError(scheme)


async def waiting(kit: LockKit, waiters: int, say: Callable[[str], None]) -> dict[str, Any]:
    holder = kit.lock(KEY)
    assert await holder.aacquire()
    threads_before = os_threads()
    done = 0

    async def waiter() -> None:
        nonlocal done
        lock = kit.lock(KEY, fair=True)
        assert await lock.aacquire(timeout=120)
        await lock.arelease()
        done += 1

    tasks = [asyncio.create_task(waiter()) for _ in range(waiters)]
    deadline = time.monotonic() + 120
    # Read on the loop, blocking it briefly: a worker thread would show up in the count.
    while queued(kit) < waiters:
        if time.monotonic() > deadline:
            raise RuntimeError("the waiters did not all queue within 120 s")
        await asyncio.sleep(0.2)
    threads_waiting = os_threads()
    say("queued")
    sys.stdin.readline()  # the parent counts from here (it answers at once)
    started = time.monotonic()
    await holder.arelease()
    await asyncio.gather(*tasks)
    took = time.monotonic() - started
    say("drained")
    return {
        "threads_before": threads_before,
        "threads_waiting": threads_waiting,
        "drain_s": took,
        "handovers": done,
    }


def child(url: str, waiters: int) -> None:
    def say(word: str) -> None:
        print(word, flush=True)

    with LockKit(url, namespace=f"aw-{uuid.uuid4().hex[:8]}", ttl=30.0) as kit:
        result = asyncio.run(waiting(kit, waiters, say))
    result["peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(result), flush=True)


@contextmanager
def redis_store() -> Iterator[tuple[str, Callable[[], Any]]]:
    from lockkit_core.testing import RedisServer

    from .redis_monitor import CommandCounter

    server = RedisServer()
    try:
        yield str(server.url), lambda: CommandCounter(server.port)
    finally:
        server.close()


class ZooKeeperPackets:
    """Requests a ZooKeeper server received inside the block (``mntr``)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.total = 0

    def _received(self) -> int:
        from lockkit_core.testing.zookeeper import four_letter

        for line in four_letter(self.port, "mntr").splitlines():
            name, _, value = line.partition("\t")
            if name == "zk_packets_received":
                return int(value)
        raise RuntimeError("no zk_packets_received in mntr (is 4lw mntr allowed?)")

    def __enter__(self) -> ZooKeeperPackets:
        self._start = self._received()
        return self

    def __exit__(self, *exc: object) -> None:
        self.total = self._received() - self._start


@contextmanager
def zookeeper_store() -> Iterator[tuple[str, Callable[[], Any]]]:
    from lockkit_core.testing.zookeeper import ZooKeeperServer

    server = ZooKeeperServer(tick_ms=200)
    try:
        yield server.url + "?session_timeout=10", lambda: ZooKeeperPackets(server.port)
    finally:
        server.close()


class EtcdMessages:
    """gRPC messages an etcd member received inside the block (its ``/metrics``), by method."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.total = 0
        self.commands: dict[str, int] = {}

    def _received(self) -> dict[str, int]:
        from lockkit_core.testing.etcd import grpc_messages

        return grpc_messages(self.port)

    def __enter__(self) -> EtcdMessages:
        self._start = self._received()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._received()
        for method, count in end.items():
            if count - self._start.get(method, 0):
                self.commands[method] = count - self._start.get(method, 0)
        self.total = sum(self.commands.values())


@contextmanager
def etcd_store() -> Iterator[tuple[str, Callable[[], Any]]]:
    from lockkit_core.testing.etcd import EtcdServer

    server = EtcdServer()
    try:
        yield server.url, lambda: EtcdMessages(server.port())
    finally:
        server.close()


STORES = {"redis": redis_store, "zookeeper": zookeeper_store, "etcd": etcd_store}


def run_one(url: str, counter: Callable[[], Any], waiters: int) -> dict[str, Any]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.async_waiters", "--child", url, str(waiters)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if proc.stdout.readline().strip() != "queued":
            raise RuntimeError("the child failed before queueing")
        with counter() as seen:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            if proc.stdout.readline().strip() != "drained":
                raise RuntimeError("the child failed while draining")
        result: dict[str, Any] = json.loads(proc.stdout.readline())
    finally:
        proc.wait(timeout=60)
    result["round_trips"] = seen.total
    result["kinds"] = dict(getattr(seen, "commands", {}))
    result["per_handover"] = seen.total / max(1, result["handovers"])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiters", default="10,1000")
    parser.add_argument("--stores", default="redis,zookeeper")
    parser.add_argument("--child", nargs=2, metavar=("URL", "WAITERS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    counts = [int(n) for n in args.waiters.split(",")]
    print(
        "| store | waiters | peak RSS MiB | RSS growth vs first | OS threads before / waiting "
        "| drain s | round trips | per hand-over |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for name in args.stores.split(","):
        with STORES[name]() as (url, counter):
            first = None
            for waiters in counts:
                r = run_one(url, counter, waiters)
                rss = r["peak_rss_kib"] / 1024
                first = rss if first is None else first
                print(
                    f"| {name} | {waiters} | {rss:.1f} | {rss - first:+.1f} MiB "
                    f"| {r['threads_before']} / {r['threads_waiting']} | {r['drain_s']:.3f} "
                    f"| {r['round_trips']} | {r['per_handover']:.2f} |",
                    flush=True,
                )
                if r["kinds"]:
                    print(f"<!-- {name} {waiters}: {r['kinds']} -->", flush=True)


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
