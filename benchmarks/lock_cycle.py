"""``python -m benchmarks.lock_cycle``: the Lock layer's own cost on ``memory://``.

Three series, in CPU time (``time.process_time``, so other processes' load inflates them
less than wall time) per acquire+release, each the median of ``--rounds`` rounds run in
rotation: the store's own work (``backend.try_acquire`` + ``backend.release``, the floor), one
reused handle (``acquire()``/``release()``), and ``with kit.lock(key): pass`` (a handle per
cycle). ``--redis`` adds two on a redis-server started for the run: the bare redis-py floor
(``SET NX PX`` + compare-and-delete, :mod:`benchmarks.redis_floor`) and ``with
kit.lock(key)`` on fresh keys (this process's CPU time only: the server's is the same for
both). ``--compare DIR`` runs each round a second time in a child process importing
``lockkit_core`` from ``DIR`` (e.g. ``git archive`` of an older commit), interleaved, so the
two trees meet the same load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

__all__ = ["SERIES", "measure"]

SERIES = ("store floor", "handle reuse", "with kit.lock")
REDIS_SERIES = ("redis-py floor", "redis with kit.lock")


def _redis_cycles(url: str) -> dict[str, Callable[[], None]]:
    import itertools

    from benchmarks.redis_floor import Floor
    from lockkit_core import LockKit

    floor = Floor(url)
    kit = LockKit(url, namespace="cycle")
    numbers = itertools.count()

    def bare() -> None:
        floor.cycle(f"floor:{next(numbers)}")

    def fresh() -> None:
        with kit.lock(f"k{next(numbers)}"):
            pass

    return dict(zip(REDIS_SERIES, (bare, fresh), strict=True))


def _cycles() -> dict[str, Callable[[], None]]:
    from lockkit_core import LockKit

    kit = LockKit("memory://bench-cycle")
    handle = kit.lock("a")
    backend = kit.backend
    owner = "0" * 32

    def floor() -> None:
        backend.try_acquire("a", owner, 30.0)
        backend.release("a", owner)

    def reuse() -> None:
        handle.acquire()
        handle.release()

    def fresh() -> None:
        with kit.lock("a"):
            pass

    return dict(zip(SERIES, (floor, reuse, fresh), strict=True))


def measure(cycles: int, redis_url: str | None = None) -> dict[str, float]:
    """CPU microseconds per cycle of each series, in this process (one round)."""
    found: dict[str, float] = {}
    series = _cycles()
    if redis_url is not None:
        series.update(_redis_cycles(redis_url))
    for name, cycle in series.items():
        if name in REDIS_SERIES:
            cycles = max(1, cycles // 10)
        for _ in range(min(cycles, 2000)):
            cycle()
        started = time.process_time()
        for _ in range(cycles):
            cycle()
        found[name] = (time.process_time() - started) / cycles * 1e6
    return found


def _child(tree: str, cycles: int, redis_url: str | None) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    # Run from ``tree`` with this checkout last on the path: ``lockkit_core`` then comes from
    # ``tree`` (the working directory is first on ``sys.path``), the benchmarks from here.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        f"import sys; sys.path.append({root!r}); import json, lockkit_core; "
        "import benchmarks.lock_cycle as b; "
        f"assert lockkit_core.__file__.startswith({tree!r}), lockkit_core.__file__; "
        f"print(json.dumps(b.measure({cycles}, {redis_url!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tree, check=True, capture_output=True
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lock_cycle", description=__doc__)
    parser.add_argument("--cycles", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compare", metavar="DIR", help="a tree holding another lockkit_core")
    parser.add_argument("--redis", action="store_true", help="add the redis:// series")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        redis_url = None
        if args.redis:
            from .servers import redis_server

            redis_url = stack.enter_context(redis_server(None)).url
        _report(args, redis_url)
    return 0


def _report(args: argparse.Namespace, redis_url: str | None) -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this tree": here}
    if args.compare:
        trees = {"other tree": args.compare, **trees}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            rounds[name].append(_child(tree, args.cycles, redis_url))
    print(f"CPU us per acquire+release, median of {args.rounds} rounds of {args.cycles} cycles; "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'series':<20}" + "".join(f"{name:>14}" for name in trees))
    for series in SERIES + (REDIS_SERIES if redis_url else ()):
        row = [statistics.median(r[series] for r in rounds[name]) for name in trees]
        print(f"{series:<20}" + "".join(f"{value:>14.2f}" for value in row))


if __name__ == "__main__":
    sys.exit(main())
