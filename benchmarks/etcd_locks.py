"""``python -m benchmarks.etcd_locks [--quick]`` (or ``scripts/bench-etcd``): ``etcd://``
against etcd3gw's own ``Lock`` on one real etcd member started for the run.

1. uncontended acquire+release of one key in one process: latency, and requests per cycle
   (every HTTP request to the gateway is one round trip);
2. ``processes`` processes contending for one key: hand-off latency (from the holder calling
   release to the next holder returning from acquire, counted only when that next holder was
   already waiting), in milliseconds and in write round trips (a ``kv/put``: every lock
   operation is a raft commit); overlaps; leases of the run still on the server at its end;
3. fairness: ``contenders`` threads, each with a kit of its own, ask for a held key one after
   the other; the share of rounds whose acquisition order equals the request order.

etcd3gw's ``Lock.acquire()`` is one attempt that returns False when the key is busy; the
benchmark retries it every 10 ms (each attempt grants a lease that it never revokes).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lockkit_core.testing.etcd import EtcdServer

from . import report
from .machine import isolated, spin
from .report import Column
from .stats import Section, percentile, section_stats

_SPAWN = multiprocessing.get_context("spawn")
TTL = 10.0
ETCD3GW_RETRY = 0.01
Acquire = Callable[[], object]
Release = Callable[[], object]
#: (acquire, release, requests sent so far)
Handle = tuple[Acquire, Release, Callable[[], int]]


@dataclass(frozen=True)
class Settings:
    cycles: int = 1000
    warmup: int = 50
    processes: int = 8
    seconds: float = 3.0
    hold: float = 0.0005
    contenders: int = 8
    fair_rounds: int = 10


QUICK = Settings(cycles=200, seconds=1.0, fair_rounds=3)


# -- contenders ----------------------------------------------------------------------------------


def _lockkit(url: str, key: str, fair: bool) -> Handle:
    from lockkit_core import LockKit
    from lockkit_core.backends.etcd import client as gateway
    from lockkit_core.backends.etcd import watch

    sent = [0]
    call, start_watch = gateway.GatewayClient._call, watch.Watch.__init__

    def counted_call(self: Any, *args: Any) -> Any:
        sent[0] += 1
        return call(self, *args)

    def counted_watch(self: Any, *args: Any, **kwargs: Any) -> None:
        sent[0] += 1
        start_watch(self, *args, **kwargs)

    gateway.GatewayClient._call = counted_call  # type: ignore[method-assign,assignment]
    watch.Watch.__init__ = counted_watch  # type: ignore[method-assign]
    kit = LockKit(url, ttl=TTL)
    lock = kit.lock(key, fair=fair)
    return lock.acquire, lock.release, lambda: sent[0]


def _etcd3gw(url: str, key: str, fair: bool) -> Handle:
    import etcd3gw

    host, _, port = url.removeprefix("etcd://").partition(":")
    client = etcd3gw.client(host=host, port=int(port))
    sent = [0]
    post = client.post

    def counted_post(*args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return post(*args, **kwargs)

    client.post = counted_post  # type: ignore[method-assign]
    lock = client.lock(key, ttl=int(TTL))

    def acquire() -> bool:
        while not lock.acquire():
            time.sleep(ETCD3GW_RETRY)
        return True

    return acquire, lock.release, lambda: sent[0]


CONTENDERS: dict[str, Callable[[str, str], Handle]] = {
    "lockkit etcd://": lambda url, key: _lockkit(url, key, False),
    "lockkit etcd:// fair=True": lambda url, key: _lockkit(url, key, True),
    "etcd3gw Lock (retried every 10 ms)": lambda url, key: _etcd3gw(url, key, False),
}


# -- 1. uncontended ------------------------------------------------------------------------------


def _round_trip_us(url: str, n: int = 300) -> tuple[float, float]:
    """p50 of one read (``kv/range``) and of one write (``kv/put``, a raft commit), in us."""
    from lockkit_core.backends.etcd import EtcdBackend
    from lockkit_core.registry import create_backend

    backend = create_backend(url)
    assert isinstance(backend, EtcdBackend)
    found = []
    for path, body in (("kv/range", {"key": "eA=="}), ("kv/put", {"key": "eA==", "value": ""})):
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            backend.client.call(path, body, "time a round trip")
            samples.append(time.perf_counter() - started)
        found.append(statistics.median(samples) * 1e6)
    backend.close()
    return found[0], found[1]


def _uncontended_child(name: str, url: str, cycles: int, warmup: int) -> dict[str, float]:
    acquire, release, sent = CONTENDERS[name](url, f"bench:u:{name}")
    for _ in range(warmup):
        acquire()
        release()
    before = sent()
    samples = []
    for _ in range(cycles):
        started = time.perf_counter()
        acquire()
        release()
        samples.append(time.perf_counter() - started)
    micros = sorted(s * 1e6 for s in samples)
    return {
        "cycles": cycles,
        "mean_us": sum(micros) / len(micros),
        "p50_us": percentile(micros, 50),
        "p99_us": percentile(micros, 99),
        "requests": (sent() - before) / cycles,
    }


# -- 2. contention -------------------------------------------------------------------------------


def _contention_child(name: str, url: str, settings: Settings, barrier: Any, results: Any) -> None:
    import os

    try:
        acquire, release, _ = CONTENDERS[name](url, "bench:contended")
        acquire()
        release()
        barrier.wait(120)
        start = time.monotonic()
        stop = start + settings.seconds
        sections: list[Section] = []
        while (asked := time.monotonic()) < stop:
            acquire()
            got = time.monotonic()
            spin(settings.hold)
            done = time.monotonic()
            release()
            sections.append((asked, got, done, os.getpid()))
        results.put((start, sections, None))
    except BaseException as exc:
        barrier.abort()
        results.put((0.0, [], f"{type(exc).__name__}: {exc}"))


def _contention(name: str, server: EtcdServer, settings: Settings, rtt_us: float) -> dict[str, Any]:
    leases_before = set(server.leases())
    barrier = _SPAWN.Barrier(settings.processes)
    results = _SPAWN.Queue()
    workers = [
        _SPAWN.Process(
            target=_contention_child,
            args=(name, server.url, settings, barrier, results),
            daemon=True,
        )
        for _ in range(settings.processes)
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=settings.seconds + 180) for _ in workers]
    for worker in workers:
        worker.join(10)
    errors = [error for _, _, error in reports if error]
    if errors:
        return {"library": name, "error": errors[0]}
    sections = [s for _, found, _ in reports for s in found]
    start = min(begun for begun, _, _ in reports)
    stats = section_stats([(sections, start)], settings.seconds, settings.processes)
    ordered = sorted(sections, key=lambda s: s[1])
    handoffs = sorted(
        b[1] - a[2]
        for a, b in itertools.pairwise(ordered)
        if a[3] != b[3] and b[0] < a[2]  # the next holder was waiting when a released
    )
    return {
        "library": name,
        "per_second": stats.per_second,
        "sections": stats.sections,
        "overlaps": stats.overlaps,
        "handoff_p50": percentile(handoffs, 50),
        "handoff_p99": percentile(handoffs, 99),
        "handoff_rtt": percentile(handoffs, 50) * 1e6 / rtt_us,
        "leases_left": len(set(server.leases()) - leases_before),
    }


def _one_waiter(url: str, rounds: int = 50) -> dict[str, Any]:
    """One holder and one waiting thread: hand-off latency and the requests sent between
    the holder calling release and the waiter returning from acquire (the critical path)."""
    acquire, release, sent = CONTENDERS["lockkit etcd://"](url, "bench:one")
    w_acquire, w_release, _ = CONTENDERS["lockkit etcd://"](url, "bench:one")
    times: list[float] = []
    requests: list[int] = []
    for _ in range(rounds):
        acquire()
        got: list[tuple[float, int]] = []

        def wait(out: list[tuple[float, int]] = got) -> None:
            w_acquire()
            out.append((time.perf_counter(), sent()))
            w_release()  # the lock is reentrant per thread: released by the thread that took it

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.05)  # queued and watching
        before, started = sent(), time.perf_counter()
        release()
        waiter.join(30)
        times.append(got[0][0] - started)
        requests.append(got[0][1] - before)
    times.sort()
    return {
        "handoff_p50": percentile(times, 50),
        "handoff_p99": percentile(times, 99),
        "requests": statistics.median(requests),
    }


# -- 3. fairness ---------------------------------------------------------------------------------


def _fairness(name: str, url: str, settings: Settings) -> dict[str, Any]:
    in_order = 0
    placed = 0
    for round_no in range(settings.fair_rounds):
        key = f"bench:fair:{round_no}"
        holder = CONTENDERS[name](url, key)
        others = [CONTENDERS[name](url, key) for _ in range(settings.contenders)]
        order: list[int] = []

        def turn(i: int, others: list[Handle] = others, order: list[int] = order) -> None:
            acquire, release, _ = others[i]
            acquire()
            order.append(i)
            release()

        holder[0]()
        threads = [threading.Thread(target=turn, args=(i,)) for i in range(len(others))]
        for t in threads:
            t.start()
            time.sleep(0.03)  # each asks well after the one before
        holder[1]()
        for t in threads:
            t.join(60)
        in_order += order == list(range(len(others)))
        placed += sum(1 for i, got in enumerate(order) if got == i)
    total = settings.fair_rounds * settings.contenders
    return {
        "library": name,
        "rounds": settings.fair_rounds,
        "fifo_rounds": in_order / settings.fair_rounds,
        "in_place": placed / total,
    }


# -- report --------------------------------------------------------------------------------------

UNCONTENDED = (
    Column("library", lambda r: str(r["library"]), left=True),
    Column("cycles", report._number("cycles", 0)),
    Column("mean us", report._number("mean_us")),
    Column("p50 us", report._number("p50_us")),
    Column("p99 us", report._number("p99_us")),
    Column("requests/cycle", report._number("requests", 2)),
)
CONTENTION = (
    Column("library", lambda r: str(r["library"]), left=True),
    Column("CS/s", report._number("per_second", 0)),
    Column("sections", report._number("sections", 0)),
    Column("hand-off p50 ms", report._number("handoff_p50", 2, 1e3)),
    Column("hand-off p99 ms", report._number("handoff_p99", 2, 1e3)),
    Column("hand-off p50 write RTTs", report._number("handoff_rtt", 1)),
    Column("overlaps", report._number("overlaps", 0)),
    Column("leases left", report._number("leases_left", 0)),
)
FAIRNESS = (
    Column("library", lambda r: str(r["library"]), left=True),
    Column("rounds", report._number("rounds", 0)),
    Column("FIFO rounds", report._percent("fifo_rounds")),
    Column("in place", report._percent("in_place")),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench-etcd", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    with EtcdServer() as server:
        read_rtt, rtt = _round_trip_us(server.url)
        print(
            f"etcd member at {server.url}; round trips: read {read_rtt:.0f} us, write {rtt:.0f} us",
            file=sys.stderr,
        )
        rows1, rows2, rows3 = [], [], []
        for name in CONTENDERS:
            print(f"  .. {name}", file=sys.stderr, flush=True)
            try:
                found = isolated(
                    None, _uncontended_child, name, server.url, settings.cycles, settings.warmup
                )
                rows1.append({"library": name, **found})
            except Exception as exc:
                rows1.append({"library": name, "error": f"{type(exc).__name__}: {exc}"})
            rows2.append(_contention(name, server, settings, rtt))
            rows3.append(isolated(None, _fairness, name, server.url, settings))
        one = isolated(None, _one_waiter, server.url)
    print(
        f"etcd {server.url}; round trip p50: read (kv/range) {read_rtt:.0f} us, write "
        f"(kv/put) {rtt:.0f} us; hand-offs are counted in write round trips; ttl {TTL:g} s"
    )
    print()
    print(
        report.render_table(
            "1. uncontended acquire+release, one key, one process", UNCONTENDED, rows1
        )
    )
    print()
    print(
        report.render_table(
            f"2. {settings.processes} processes, one key, {settings.hold * 1e3:g} ms sections, "
            f"{settings.seconds:g} s",
            CONTENTION,
            rows2,
        )
    )
    print(
        f"\n2b. one holder, one waiting thread (lockkit etcd://): hand-off p50 "
        f"{one['handoff_p50'] * 1e3:.2f} ms, p99 {one['handoff_p99'] * 1e3:.2f} ms; requests "
        f"from release() to the waiter's return: {one['requests']:g} (release's lease revoke, "
        "the waiter's create transaction)"
    )
    print()
    print(
        report.render_table(
            f"3. fairness: {settings.contenders} contenders ask 30 ms apart for a held key",
            FAIRNESS,
            rows3,
        )
    )
    ours = next(r for r in rows2 if r["library"] == "lockkit etcd://")
    fair = next(r for r in rows3 if r["library"] == "lockkit etcd:// fair=True")
    print("\nlockkit targets")
    handoff = ours.get("handoff_rtt", float("nan"))
    print(
        f"  {'met' if one['requests'] <= 2 else 'missed':<8} hand-off within 2 round trips: "
        f"{one['requests']:g} requests on the critical path; measured p50 under "
        f"{settings.processes} processes {handoff:.1f} write round trips of time"
    )
    fifo = fair.get("fifo_rounds", 0.0)
    print(f"  {'met' if fifo == 1.0 else 'missed':<8} FIFO 100% with fair=True: {fifo:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
