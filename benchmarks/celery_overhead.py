"""Per-task overhead of ``LockedTask`` against a plain task, celery-once and celery-singleton.

``scripts/bench-celery [--tasks N] [--rounds N] [--worker]``. Starts its own redis-server,
used as every contender's lock store. Each task is called with a fresh argument (no
duplicates). By default in Celery's eager mode, so a task costs its enqueue-time and
run-time lock work and nothing else: no broker round trip or worker scheduling hides or pads
it (eager mode goes through the same lock code as a worker). With ``--worker``, end to end:
the tasks are published to a Redis broker and run by one real worker (``--pool=solo``); a
round is the time from the first publish until the worker has run them all, and the CPU time
the producer, the worker and redis-server ran meanwhile (steadier than the wall clock on a
loaded machine); the contenders take turns in rotating order, all pinned (``--pinning``).
Prints microseconds per task (median of the rounds) and the overhead over the plain task.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import Celery

from lockkit_celery import locked_task
from lockkit_core.testing import RedisServer


def _contenders(redis_url: str) -> dict[str, Any]:
    app = Celery("bench", broker="memory://", set_as_current=False)
    app.conf.update(
        task_always_eager=True,
        lockkit_url=redis_url,
        lockkit_namespace="bench",
        ONCE={
            "backend": "celery_once.backends.Redis",
            "settings": {"url": redis_url, "default_timeout": 60},
        },
        singleton_backend_url=redis_url,
    )

    @app.task(name="plain", shared=False)
    def plain(n: int) -> int:
        return n

    @locked_task(app=app, name="lockkit", shared=False)
    def locked(n: int) -> int:
        return n

    found: dict[str, Any] = {"plain task": plain, "lockkit LockedTask": locked}
    try:
        from celery_once import QueueOnce

        @app.task(name="once", base=QueueOnce, shared=False)
        def once(n: int) -> int:
            return n

        found["celery-once QueueOnce"] = once
    except ImportError:
        found["celery-once QueueOnce"] = None
    try:
        from celery_singleton import Singleton

        @app.task(name="singleton", base=Singleton, shared=False)
        def singleton(n: int) -> int:
            return n

        found["celery-singleton Singleton"] = singleton
    except ImportError:
        found["celery-singleton Singleton"] = None
    return found


def _round(task: Any, start: int, count: int) -> float:
    began = time.perf_counter()
    for n in range(start, start + count):
        task.delay(n)
    return (time.perf_counter() - began) / count


def _count(server: RedisServer) -> None:
    """Print every command each contender sends the store for one fresh call (enqueue and
    run, in eager mode: the same lock code as a worker), from redis MONITOR, and how many
    commands its scripts ran inside the server."""
    from .redis_monitor import CommandCounter

    contenders = _contenders(server.url)
    for name in ("lockkit LockedTask", "celery-once QueueOnce"):
        task = contenders[name]
        if task is None:
            continue
        task.delay(-1)  # scripts loaded, connections open
        with CommandCounter(server.port) as seen:
            task.delay(-2)
        print(f"{name}: {seen.total} round trips, {len(seen.scripted)} commands inside scripts")
        for line in seen.lines:
            print(f"    {line[:160]}")


@dataclass
class WorkerRun:
    """Per contender and round: microseconds per task, wall clock and CPU (producer + worker
    + redis-server: everything the tasks made run)."""

    wall: dict[str, list[float]]
    cpu: dict[str, list[float]]
    note: str
    #: the CPU part by part: "producer", "worker", "redis-server"
    parts: dict[str, dict[str, list[float]]]
    #: the last round's server commands (INFO commandstats): name -> (calls per task, us per
    #: call); commands run inside a script are counted too (their time is in the script's)
    commands: dict[str, dict[str, tuple[float, float]]]


def _worker_rounds(server: RedisServer, tasks: int, rounds: int, pinning: str) -> WorkerRun:
    from .machine import choose_pinnings, cpu_ns, pin_all_threads, pin_self

    base = server.url.rsplit("/", 1)[0]
    os.environ["BENCH_REDIS"] = base
    here = Path(__file__).resolve().parent
    import redis

    from . import celery_worker_app as bench

    (pin,) = choose_pinnings((pinning,))
    assert server.pid is not None
    pin_all_threads(server.pid, pin.server_cpu)
    allowed = os.sched_getaffinity(0)
    pin_self(pin.client_cpu)  # the worker started below inherits it
    env = {**os.environ, "PYTHONPATH": str(here)}
    log = Path(tempfile.gettempdir()) / "lockkit-bench-celery-worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_worker_app", "worker",
             "--pool=solo", "-l", "warning", "--without-gossip", "--without-mingle",
             "--without-heartbeat"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    counts = redis.Redis.from_url(f"{base}/3")
    names = list(bench.TASKS)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    parts: dict[str, dict[str, list[float]]] = {
        part: {name: [] for name in names} for part in _PARTS
    }
    commands: dict[str, dict[str, tuple[float, float]]] = {}
    try:
        for i in range(rounds + 1):  # the first round warms the worker up
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:  # rotate which goes first
                task = bench.TASKS[name]
                counter = f"done:{task.name.split('.')[1]}"
                counts.delete(counter)
                counts.config_resetstat()
                used = (time.process_time_ns(), cpu_ns(worker.pid), cpu_ns(server.pid))
                began = time.perf_counter()
                for n in range(tasks):
                    task.delay(i * 10**6 + n)
                while int(counts.get(counter) or 0) < tasks:
                    if worker.poll() is not None:
                        raise RuntimeError("the benchmark worker died; see " + str(log))
                    time.sleep(0.002)
                took = time.perf_counter() - began
                if i == rounds:
                    commands[name] = _commands_per_task(counts, tasks)
                now = (time.process_time_ns(), cpu_ns(worker.pid), cpu_ns(server.pid))
                if i:
                    wall[name].append(took / tasks * 1e6)
                    each = [(b - a) / tasks / 1000.0 for a, b in zip(used, now, strict=True)]
                    cpu[name].append(sum(each))
                    for part, value in zip(_PARTS, each, strict=True):
                        parts[part][name].append(value)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(30)
        counts.close()
        os.sched_setaffinity(0, allowed)
    return WorkerRun(wall, cpu, pin.note, parts, commands)


_PARTS = ("producer", "worker", "redis-server")


def _commands_per_task(client: Any, tasks: int) -> dict[str, tuple[float, float]]:
    """The server's commands since the last CONFIG RESETSTAT, per task: calls and us/call
    (broker traffic included: compare with the plain task's)."""
    stats = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): (stat["calls"] / tasks, float(stat["usec_per_call"]))
        for name, stat in stats.items()
        if stat["calls"] >= tasks // 2 and name != "cmdstat_config"
    }


def _print_worker(run: WorkerRun, tasks: int) -> None:
    """Medians over the rounds; an overhead is the median of each round's difference from
    the plain task in the same round (a burst of load elsewhere hits both)."""
    print(
        f"Through a real worker (--pool=solo, Redis broker), {tasks} tasks x "
        f"{len(run.wall['plain task'])} rounds, rotating order; {run.note}; microseconds per task"
    )
    print(
        f"{'contender':<28} {'wall':>8} {'+wall':>8} {'cpu':>8} {'+cpu':>8}   +cpu: "
        + ", ".join(_PARTS)
    )
    added: dict[str, tuple[float, float]] = {}

    def plus(series: dict[str, list[float]], name: str) -> float:
        return statistics.median(
            a - b for a, b in zip(series[name], series["plain task"], strict=True)
        )

    for name in run.wall:
        added[name] = plus(run.wall, name), plus(run.cpu, name)
        by_part = " ".join(f"{plus(run.parts[part], name):6.0f}" for part in _PARTS)
        print(
            f"{name:<28} {statistics.median(run.wall[name]):8.0f} {added[name][0]:8.0f} "
            f"{statistics.median(run.cpu[name]):8.0f} {added[name][1]:8.0f}   {by_part}"
        )
    print("Server commands in the last round, per task (calls x us per call):")
    for name, seen in run.commands.items():
        listed = ", ".join(
            f"{cmd} {calls:.1f}x{usec:.1f}" for cmd, (calls, usec) in sorted(seen.items())
        )
        print(f"  {name:<26} {listed}")
    ours, once = added.get("lockkit LockedTask"), added.get("celery-once QueueOnce")
    if ours and once and once[0] > 0 and once[1] > 0:
        print(
            f"lockkit's overhead over celery-once's: {ours[0] / once[0]:.2f}x wall, "
            f"{ours[1] / once[1]:.2f}x CPU (budget {ONCE_BUDGET}x)"
        )


#: lockkit's per-task overhead through a real worker may be this many times celery-once's
ONCE_BUDGET = 1.6


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=500, help="tasks per round (500)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds (9; the median is shown)")
    parser.add_argument("--worker", action="store_true", help="end to end through a worker")
    parser.add_argument("--count", action="store_true", help="list the store commands per task")
    parser.add_argument(
        "--pinning", choices=["same", "split"], default="same",
        help="--worker: redis-server, this process and the worker on one CPU (same), or the "
        "server on one and the clients on another (split)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    with RedisServer() as server:
        if args.count:
            _count(server)
            return
        if args.worker:
            _print_worker(_worker_rounds(server, args.tasks, args.rounds, args.pinning), args.tasks)
            return
        contenders = _contenders(server.url)
        live = {name: task for name, task in contenders.items() if task is not None}
        for task in live.values():
            _round(task, 0, 100)  # warm up connections and scripts
        # Rounds interleave the contenders, so a burst of load elsewhere hits them alike.
        rounds: dict[str, list[float]] = {name: [] for name in live}
        for i in range(args.rounds):
            for name, task in live.items():
                rounds[name].append(_round(task, (i + 1) * 10**6, args.tasks))
        results: dict[str, float | None] = {
            name: statistics.median(rounds[name]) if name in live else None for name in contenders
        }
    _print(results)


def _print(results: dict[str, float | None]) -> None:
    base = results["plain task"]
    assert base is not None
    print(f"{'contender':<28} {'us/task':>9} {'overhead us':>12}")
    for name, per_task in results.items():
        if per_task is None:
            print(f"{name:<28} {'not installed (uv sync --group bench-celery)':>22}")
            continue
        print(f"{name:<28} {per_task * 1e6:9.0f} {(per_task - base) * 1e6:12.0f}")


if __name__ == "__main__":
    main()
