"""``python -m benchmarks.redis_fair``: redis:// ``fair=True`` against the default lock.

Two measurements on one fresh redis-server:

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

The target: FIFO 100 % with ``fair=True`` at >= 90 % of the default lock's sections/s. The
load average is printed before and after: on a shared machine, say it next to the rates.
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
from .machine import choose_pinnings, cpu_ns, pin_self
from .redis_monitor import CommandCounter
from .scenarios import Settings
from .servers import BenchRedis, redis_server

_SPAWN = multiprocessing.get_context("spawn")
_NAMES = ("lockkit", "lockkit fair=True")


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redis_fair", description=__doc__)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    settings = dataclasses.replace(
        Settings(), seconds=args.seconds, processes=args.processes, contention_rounds=1
    )
    (pinning,) = choose_pinnings(("same",))
    started = os.getloadavg()
    with redis_server(pinning.server_cpu) as server:
        pin_self(pinning.client_cpu)
        orders = [_order(server.url, server.client, args.processes) for _ in range(args.rounds)]
        in_place = sum(i == got for order in orders for i, got in enumerate(order))
        fifo = 100.0 * in_place / (args.processes * args.rounds)

        def fresh() -> str:
            server.reset()
            return server.url

        rates: dict[str, list[float]] = {name: [] for name in _NAMES}
        server_us: dict[str, list[float]] = {name: [] for name in _NAMES}
        switched: dict[str, list[float]] = {name: [] for name in _NAMES}
        for repeat in range(args.repeats):
            names = _NAMES if repeat % 2 == 0 else _NAMES[::-1]
            for name in names:
                ran = cpu_ns(server.pid) if server.pid is not None else 0
                (row,) = scenarios.contention([name], fresh, settings, pinning.client_cpu)
                if "error" in row:
                    raise RuntimeError(f"{name}: {row['error']}")
                rates[name].append(float(row["per_second"]))
                switched[name].append(100.0 * float(row["handoff_share"]))
                if server.pid is not None:
                    ran = cpu_ns(server.pid) - ran
                    server_us[name].append(ran / 1000.0 / max(1, int(row["sections"])))
        trips = _round_trips(server, settings, pinning.client_cpu)
    default, fair = (statistics.median(rates[name]) for name in _NAMES)
    print(f"redis:// fair=True, {args.processes} processes ({pinning.note})")
    print(f"  load average {started[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(f"  order: {args.rounds} rounds, served as queued: {fifo:.0f} %  {orders}")
    for name in _NAMES:
        shown = ", ".join(f"{rate:,.0f}" for rate in rates[name])
        print(
            f"  {name:<18} sections/s median {statistics.median(rates[name]):>7,.0f}  ({shown})"
            f"  per section: {trips[name][0]:.2f} commands, {trips[name][1]:.2f} reads"
        )
        if server_us[name]:
            shown = ", ".join(f"{us:.0f}" for us in server_us[name])
            print(
                f"  {'':<18} redis-server CPU per section median "
                f"{statistics.median(server_us[name]):.0f} µs  ({shown})"
            )
        # barging keeps one process going; strict order changes process on every section
        print(
            f"  {'':<18} the next section in another process: median "
            f"{statistics.median(switched[name]):.0f} % of sections"
        )
    ratio = fair / default
    met = fifo == 100.0 and ratio >= 0.9
    print(f"  {'met' if met else 'missed':<7} FIFO 100 % at >= 90 % of the default: {ratio:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
