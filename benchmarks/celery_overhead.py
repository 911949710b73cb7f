"""Per-task overhead of ``LockedTask`` against a plain task, celery-once and celery-singleton.

``scripts/bench-celery [--tasks N]``. Starts its own redis-server, used as every contender's
lock store. Each task is called with a fresh argument (no duplicates), in Celery's eager
mode, so a task costs its enqueue-time and run-time lock work and nothing else: no broker
round trip or worker scheduling hides or pads it. The lock operations are the ones a real
worker makes (eager mode goes through the same code). Prints a table of microseconds per
task (median of the rounds) and the overhead over the plain task.
"""

from __future__ import annotations

import argparse
import statistics
import time
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


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=500, help="tasks per round (500)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds (9; the median is shown)")
    args = parser.parse_args(argv)
    with RedisServer() as server:
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
