"""lockkit's ``zookeeper://`` beside kazoo's own ``Lock`` recipe; run ``scripts/bench-zookeeper``.

One throwaway standalone ZooKeeper (Debian's package, ``forceSync=no``, on loopback) serves
both libraries in turn:

1. uncontended acquire+release of one key in one process: latency per cycle, and requests per
   cycle (the server's ``zk_packets_received`` counter over the run; pings are a few per 10 s);
2. hand-off: N processes contend for one key, each holding it ``hold`` ms; the hand-off latency
   is the time from one holder calling ``release()`` to the next holder's ``acquire()``
   returning (``CLOCK_MONOTONIC`` is shared by the processes of one host), also in units of
   one measured round trip (an ``exists`` request);
3. fairness: N processes queue one after another (each waits until the one before it has
   queued) behind a held key; the share of them served in that order.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from lockkit_core.testing.zookeeper import ZooKeeperServer, four_letter

from .stats import percentile

_SPAWN = multiprocessing.get_context("spawn")
LIBRARIES = ("lockkit", "kazoo-recipe")
Handle = tuple[Callable[[], object], Callable[[], object], Callable[[], None]]


def _handle(library: str, hosts: str, key: str) -> Handle:
    """``(acquire, release, close)`` for one reusable lock on ``key``."""
    if library == "lockkit":
        from lockkit_core import LockKit

        kit = LockKit(f"zookeeper://{hosts}/?session_timeout=10", ttl=30.0, auto_renew=True)
        lock = kit.lock(key)
        return lock.acquire, lock.release, kit.close
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(10)
    recipe = client.Lock(f"/kazoo-bench/{key}")

    def close() -> None:
        client.stop()
        client.close()

    return recipe.acquire, recipe.release, close


def _packets(port: int) -> int:
    for line in four_letter(port, "mntr").splitlines():
        name, _, value = line.partition("\t")
        if name == "zk_packets_received":
            return int(value)
    raise RuntimeError("the server's mntr has no zk_packets_received")


def _round_trip(hosts: str, samples: int = 500) -> float:
    """The median latency of one ``exists`` request, in seconds."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts)
    client.start(10)
    try:
        times = []
        for _ in range(samples):
            started = time.perf_counter()
            client.exists("/zookeeper")
            times.append(time.perf_counter() - started)
        return percentile(sorted(times), 50)
    finally:
        client.stop()
        client.close()


def _uncontended(library: str, hosts: str, port: int, cycles: int) -> dict[str, Any]:
    acquire, release, close = _handle(library, hosts, f"u-{uuid.uuid4().hex[:8]}")
    try:
        for _ in range(50):
            acquire()
            release()
        times = []
        before = _packets(port)
        for _ in range(cycles):
            started = time.perf_counter()
            acquire()
            release()
            times.append(time.perf_counter() - started)
        requests = (_packets(port) - before) / cycles
    finally:
        close()
    ordered = sorted(times)
    return {
        "mean_us": sum(times) / len(times) * 1e6,
        "p50_us": percentile(ordered, 50) * 1e6,
        "p99_us": percentile(ordered, 99) * 1e6,
        "requests": requests,
    }


def _contend(
    library: str, hosts: str, key: str, seconds: float, hold: float, start_at: float, out: Any
) -> None:
    acquire, release, close = _handle(library, hosts, key)
    spans = []
    try:
        while time.monotonic() < start_at:
            time.sleep(0.001)
        end = start_at + seconds
        while time.monotonic() < end:
            acquire()
            got = time.monotonic()
            while time.monotonic() - got < hold:
                pass
            done = time.monotonic()  # the section ends here; release() starts the hand-off
            release()
            spans.append((got, done))
    finally:
        close()
        out.put(spans)


def _handoff(
    library: str, hosts: str, port: int, processes: int, seconds: float, hold: float
) -> dict[str, Any]:
    key = f"h-{uuid.uuid4().hex[:8]}"
    out = _SPAWN.Queue()
    start_at = time.monotonic() + 3.0 + 0.3 * processes  # all started and connected
    procs = [
        _SPAWN.Process(target=_contend, args=(library, hosts, key, seconds, hold, start_at, out))
        for _ in range(processes)
    ]
    before = _packets(port)
    for p in procs:
        p.start()
    runs = [(i, span) for i in range(processes) for span in out.get(timeout=seconds + 120)]
    for p in procs:
        p.join(30)
    requests = _packets(port) - before  # connecting and closing included: a few per process
    sections = sorted((got, released, who) for who, (got, released) in runs)
    gaps = [nxt[0] - cur[1] for cur, nxt in itertools.pairwise(sections) if nxt[2] != cur[2]]
    overlaps = sum(nxt[0] < cur[1] for cur, nxt in itertools.pairwise(sections))
    ordered = sorted(gaps)
    return {
        "sections": len(sections),
        "handoffs": len(gaps),
        "handoff_p50_us": percentile(ordered, 50) * 1e6 if gaps else float("nan"),
        "handoff_p99_us": percentile(ordered, 99) * 1e6 if gaps else float("nan"),
        "overlaps": overlaps,
        "requests_per_section": requests / max(1, len(sections)),
    }


def _queue_up(
    library: str, hosts: str, key: str, index: int, ready: Any, go: Any, out: Any
) -> None:
    acquire, release, close = _handle(library, hosts, key)
    try:
        go.wait(60)  # our turn to queue
        ready.set()  # the parent checks our node is there before the next one queues
        acquire()
        out.put(index)
        release()
    finally:
        close()


def _fairness(library: str, hosts: str, processes: int) -> dict[str, Any]:
    from kazoo.client import KazooClient

    key = f"f-{uuid.uuid4().hex[:8]}"
    acquire, release, close = _handle(library, hosts, key)
    watcher = KazooClient(hosts=hosts)
    watcher.start(10)
    parent = f"/lockkit/locks/k{key}" if library == "lockkit" else f"/kazoo-bench/{key}"
    out = _SPAWN.Queue()
    try:
        acquire()
        for i in range(processes):
            ready, go = _SPAWN.Event(), _SPAWN.Event()
            _SPAWN.Process(target=_queue_up, args=(library, hosts, key, i, ready, go, out)).start()
            go.set()
            ready.wait(60)
            deadline = time.monotonic() + 30
            while len(watcher.get_children(parent)) < i + 2:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{library}: contender {i} never queued")
                time.sleep(0.002)
        release()
        order = [out.get(timeout=60) for _ in range(processes)]
    finally:
        close()
        watcher.stop()
        watcher.close()
    in_place = sum(served == i for i, served in enumerate(order))
    return {"order": order, "fifo_pct": 100.0 * in_place / processes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-zookeeper", description=__doc__)
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--hold", type=float, default=0.0005, help="seconds each holder holds")
    args = parser.parse_args(argv)
    with ZooKeeperServer(tick_ms=200) as server:
        hosts = server.hosts
        rt = _round_trip(hosts)
        rows = []
        for library in LIBRARIES:
            print(f"running {library} ...", file=sys.stderr, flush=True)
            row: dict[str, Any] = {"library": library}
            row.update(_uncontended(library, hosts, server.port, args.cycles))
            row.update(
                _handoff(library, hosts, server.port, args.processes, args.seconds, args.hold)
            )
            row.update(_fairness(library, hosts, 8))
            rows.append(row)
    print(
        f"ZooKeeper standalone on loopback (forceSync=no); one round trip (exists) p50 "
        f"{rt * 1e6:.0f} us; {args.processes} processes hand off, holding "
        f"{args.hold * 1e3:g} ms; fairness with 8 queued processes"
    )
    print(
        f"{'library':<14}{'uncont. mean':>13}{'p50':>8}{'p99':>8}{'req/cycle':>10}"
        f"{'sections':>9}{'req/sect':>9}{'handoff p50':>12}{'p99':>9}{'in RTs':>7}"
        f"{'overlap':>8}{'FIFO %':>7}"
    )
    for r in rows:
        print(
            f"{r['library']:<14}{r['mean_us']:>11.0f}us{r['p50_us']:>6.0f}us"
            f"{r['p99_us']:>6.0f}us{r['requests']:>10.2f}{r['sections']:>9}"
            f"{r['requests_per_section']:>9.1f}"
            f"{r['handoff_p50_us']:>10.0f}us{r['handoff_p99_us']:>7.0f}us"
            f"{r['handoff_p50_us'] / (rt * 1e6):>7.1f}{r['overlaps']:>8}{r['fifo_pct']:>7.0f}"
        )
    ours, theirs = rows
    print("\nlockkit targets")
    verdicts = [
        (
            ours["mean_us"] <= theirs["mean_us"],
            f"uncontended no slower than kazoo's recipe: {ours['mean_us']:.0f} us vs "
            f"{theirs['mean_us']:.0f} us, {ours['requests']:.2f} vs {theirs['requests']:.2f} "
            "requests per cycle",
        ),
        (
            ours["handoff_p50_us"] <= 2 * rt * 1e6 * 1.5,
            f"hand-off within 2 round trips: p50 {ours['handoff_p50_us']:.0f} us = "
            f"{ours['handoff_p50_us'] / (rt * 1e6):.1f} x {rt * 1e6:.0f} us",
        ),
        (ours["fifo_pct"] == 100.0, f"FIFO order 100 %: {ours['fifo_pct']:.0f} %"),
        (ours["overlaps"] == 0, f"no overlapping sections: {ours['overlaps']}"),
    ]
    for met, text in verdicts:
        print(f"  {'met' if met else 'NOT MET':<8} {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
