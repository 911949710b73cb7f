"""``python -m benchmarks.redis_fair``: redis:// ``fair=True`` against the default lock.

Three measurements, on a fresh redis-server for each layout of processes on CPUs
(``--layouts``, all three by default):

- ``same``: redis-server and every client process on one CPU. Nothing overlaps: every
  microsecond of client or server work per section adds to the section, and each section
  of strict order runs in a process that slept through the others' sections (cold caches);
- ``split``: redis-server on one CPU, every client process on the other;
- ``free``: nothing pinned; the scheduler places the server and the clients on the CPUs.

1. order: ``--processes`` processes queue for a held key one after another (each only once
   the one before it is in the queue), then the holder lets go; FIFO % is the share of them
   served in the order they queued, over ``--rounds`` rounds. The order served is the order
   of their fencing tokens (strictly increasing per grant), not the order their reports
   arrive in: a multiprocessing queue sends from a thread of its own, and on a busy CPU
   a report may overtake the one of the process served before;
2. speed: the contention scenario of ``benchmarks.contended`` (``--processes`` processes on
   one key), the two locks taking turns ``--repeats`` times; the medians of sections/s, and
   of the redis-server's CPU time per section (what it ran, from ``/proc``: less sensitive to
   other work on the machine than the rates, which are wall-clock), and of the share of
   sections that went to another process than the one before;
3. round trips: one more short run of each under ``MONITOR`` (which slows the server, so it
   is never timed): the lock commands clients sent (EVALSHA, BLPOP) per section, and the
   server's read events (``total_reads_processed``, one per client write that reached it,
   so two pipelined commands count once) per section.

The target: FIFO 100 % with ``fair=True`` at >= 90 % of the default lock's sections/s, said
per layout. The load average is printed before and after: on a shared machine, say it next
to the rates. Round trips are counted once, in the first layout (they do not depend on it).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from . import scenarios
from .machine import Pinning, choose_pinnings, cpu_ns, pin_self
from .redis_monitor import CommandCounter
from .scenarios import Settings
from .servers import BenchRedis, redis_server

_SPAWN = multiprocessing.get_context("spawn")
_NAMES = ("lockkit", "lockkit fair=True")
#: the CPUs this process may use at the start, which the ``free`` layout leaves to the scheduler
_ALL_CPUS = frozenset(os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ())


def _unpin() -> None:
    """Let this process (and what it starts from now on) run on every CPU it started with."""
    if _ALL_CPUS:
        os.sched_setaffinity(0, _ALL_CPUS)


def _queue_up(url: str, namespace: str, index: int, out: Any) -> None:
    from lockkit_core import LockKit

    with LockKit(url, namespace=namespace, ttl=30.0) as kit:
        lock = kit.lock("fair", fair=True, timeout=60)
        lock.acquire()
        token = lock.token
        lock.release()
        out.put((token, index))


def _order(url: str, raw: Any, processes: int) -> list[int]:
    """One round: the order in which the queued processes got the key."""
    from lockkit_core import LockKit

    namespace = f"fair{uuid.uuid4().hex[:8]}"
    queue_key = f"lockkit:{{{namespace}:fair}}:q"
    out = _SPAWN.Queue()
    with LockKit(url, namespace=namespace, ttl=30.0) as kit:
        holder = kit.lock("fair")
        holder.acquire()
        procs = []
        for i in range(processes):
            proc = _SPAWN.Process(target=_queue_up, args=(url, namespace, i, out))
            proc.start()
            procs.append(proc)
            deadline = time.monotonic() + 60
            while raw.zcard(queue_key) < i + 1:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"contender {i} never queued")
                time.sleep(0.002)
        holder.release()
        served = sorted(out.get(timeout=60) for _ in range(processes))
        for proc in procs:
            proc.join(30)
    return [index for _, index in served]


def _round_trips(
    server: BenchRedis, settings: Settings, cpu: int | None
) -> dict[str, tuple[float, float]]:
    """Lock commands clients sent and the server's read events, per section, over a short
    run of each lock."""
    port = urlsplit(server.url).port
    assert port is not None
    short = dataclasses.replace(settings, seconds=1.0)
    found: dict[str, tuple[float, float]] = {}
    for name in _NAMES:
        server.reset()
        reads = int(server.client.info("stats")["total_reads_processed"])
        with CommandCounter(port) as seen:
            (row,) = scenarios.contention([name], lambda: server.url, short, cpu)
        reads = int(server.client.info("stats")["total_reads_processed"]) - reads
        if "error" in row:
            raise RuntimeError(f"{name}: {row['error']}")
        commands = seen.commands["evalsha"] + seen.commands["blpop"]
        found[name] = (commands / row["sections"], reads / row["sections"])
    return found


@dataclasses.dataclass
class Layout:
    """What one layout of processes on CPUs measured."""

    pinning: Pinning
    orders: list[list[int]]
    rates: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    server_us: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    switched: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    @property
    def fifo(self) -> float:
        """The share of contenders served in the order they queued, in per cent."""
        served = sum(i == got for order in self.orders for i, got in enumerate(order))
        return 100.0 * served / max(1, sum(len(order) for order in self.orders))

    @property
    def ratio(self) -> float:
        default, fair = (statistics.median(self.rates[name]) for name in _NAMES)
        return fair / default


def layouts() -> list[Pinning]:
    """Where the server and the clients run: all on one CPU, the server on one and the
    clients on another, and (``free``) wherever the scheduler puts them."""
    found = choose_pinnings(("same", "split"))
    cpus = sorted(_ALL_CPUS)
    found.append(
        Pinning(
            "free",
            None,
            None,
            f"free: nothing pinned; the scheduler places redis-server and every client process "
            f"on CPUs {', '.join(map(str, cpus)) or '(unknown)'}",
        )
    )
    return found


def _measure(pinning: Pinning, args: argparse.Namespace, settings: Settings) -> Layout:
    _unpin()  # the server inherits it where it is not pinned
    with redis_server(pinning.server_cpu) as server:
        pin_self(pinning.client_cpu)
        orders = [_order(server.url, server.client, args.processes) for _ in range(args.rounds)]

        def fresh() -> str:
            server.reset()
            return server.url

        found = Layout(pinning, orders)
        for repeat in range(args.repeats):
            for name in _NAMES if repeat % 2 == 0 else _NAMES[::-1]:
                ran = cpu_ns(server.pid) if server.pid is not None else 0
                (row,) = scenarios.contention([name], fresh, settings, pinning.client_cpu)
                if "error" in row:
                    raise RuntimeError(f"{name}: {row['error']}")
                found.rates.setdefault(name, []).append(float(row["per_second"]))
                found.switched.setdefault(name, []).append(100.0 * float(row["handoff_share"]))
                if server.pid is not None:
                    ran = cpu_ns(server.pid) - ran
                    per_section = ran / 1000.0 / max(1, int(row["sections"]))
                    found.server_us.setdefault(name, []).append(per_section)
    _unpin()
    return found


def _report(found: Layout) -> None:
    print(f"  {found.pinning.note}")
    print(f"    order: {len(found.orders)} rounds, served as queued: {found.fifo:.0f} %")
    for name in _NAMES:
        shown = ", ".join(f"{rate:,.0f}" for rate in found.rates[name])
        # barging keeps one process going; strict order changes process on every section
        print(
            f"    {name:<18} sections/s median {statistics.median(found.rates[name]):>7,.0f}"
            f"  ({shown}); redis-server CPU per section "
            f"{statistics.median(found.server_us.get(name) or [0.0]):.0f} µs; next section in "
            f"another process {statistics.median(found.switched[name]):.0f} %"
        )
    met = found.fifo == 100.0 and found.ratio >= 0.9
    verdict = "met" if met else "missed"
    print(f"    {verdict:<7} FIFO 100 % at >= 90 % of the default: {found.ratio:.0%}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redis_fair", description=__doc__)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument(
        "--layouts",
        default="same,split,free",
        help="comma-separated, of: same, split, free (default: all three)",
    )
    args = parser.parse_args(argv)
    wanted = [name.strip() for name in args.layouts.split(",") if name.strip()]
    available = layouts()
    chosen = [pinning for pinning in available if pinning.name in wanted]
    unknown = set(wanted) - {pinning.name for pinning in available}
    if unknown or not chosen:
        parser.error(f"--layouts: unknown {sorted(unknown)}; choose from same, split, free")
    settings = dataclasses.replace(
        Settings(), seconds=args.seconds, processes=args.processes, contention_rounds=1
    )
    started = os.getloadavg()
    results = [_measure(pinning, args, settings) for pinning in chosen]
    with redis_server(chosen[0].server_cpu) as server:
        trips = _round_trips(server, settings, chosen[0].client_cpu)
    _unpin()
    print(f"redis:// fair=True, {args.processes} processes on one key")
    print(f"  load average {started[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    for name in _NAMES:
        commands, reads = trips[name]
        print(f"  {name:<18} per section: {commands:.2f} commands, {reads:.2f} reads")
    for found in results:
        _report(found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
