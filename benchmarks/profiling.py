"""``python -m benchmarks.profiling``: where one library's uncontended cycle spends its time.

Starts a pinned redis-server (the same two pinnings as the benchmark), warms up, then runs
acquire+release cycles of one contender under :mod:`cProfile` and prints the functions that
cost the most, by their own time. The profiler slows Python code several times over and the
socket waits not at all, so read it for *where* client-side time goes; the benchmark says
how much.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections.abc import Sequence

from .contenders import CONTENDERS, by_name
from .machine import PINNING_NAMES, choose_pinnings, pin_self
from .servers import redis_server


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    names = [c.name for c in CONTENDERS if c.family == "redis"]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profiling", description=__doc__)
    parser.add_argument("contender", nargs="?", default="lockkit", choices=names)
    parser.add_argument("--cycles", type=int, default=5000)
    parser.add_argument("--pinning", choices=PINNING_NAMES, default="same")
    parser.add_argument("--top", type=int, default=25, help="functions to show")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Profile ``cycles`` cycles of one contender and print the costliest functions."""
    args = _parse(argv)
    (pinning,) = choose_pinnings((args.pinning,))
    with redis_server(pinning.server_cpu) as server:
        pin_self(pinning.client_cpu)
        acquire, release = by_name(args.contender).open(server.url)("bench:profile")
        for _ in range(500):
            acquire()
            release()
        started = time.perf_counter()
        for _ in range(args.cycles):
            acquire()
            release()
        plain = (time.perf_counter() - started) / args.cycles
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.cycles):
            acquire()
            release()
        profiler.disable()
    print(f"{args.contender}: {plain * 1e6:.1f} us per cycle unprofiled; {pinning.note}")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
