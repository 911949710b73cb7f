"""What lockkit's OpenTelemetry hooks add to one uncontended acquire+release on memory://.

Three processes (the API's global providers can be set once per process), one per set-up:
opentelemetry-api with no SDK; the SDK's MeterProvider with an InMemoryMetricReader; and
that plus the SDK's TracerProvider exporting every span to an InMemorySpanExporter
(SimpleSpanProcessor, always-on sampler). In each, rounds of ``cycles`` cycles on one reused
handle alternate between the hooks on and ``off`` (lockkit_core.observe's instruments set to
None, as without the otel extra), so both see the same machine load; each round is timed in
CPU time of the thread (a shared, loaded machine makes wall time useless at this scale);
"added" is the difference of their medians, in microseconds per cycle. ``sdk floor``
runs, in the SDK process, the cycle with the hooks off plus the two ``Histogram.record``
calls a cycle makes on the SDK (wait and hold, same attributes) made directly: what the SDK
itself costs, below which lockkit cannot go while it records both (measured beside the
lock's own work: the same two calls in a loop of their own take about half as long).
``spans floor`` adds the span's calls (start with the common attributes, outcome and token,
end) the same way; "on" minus "floor" is lockkit's own part.

    python -m benchmarks.telemetry [--cycles 20000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

SETUPS = {
    "api": ("api",),
    "sdk": ("sdk", "sdk floor"),
    "sdk+spans": ("sdk+spans", "spans floor"),
}


def _install(setup: str) -> None:
    if setup == "api":
        return
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    if setup == "sdk+spans":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        trace.set_tracer_provider(tracer)


def _round(first: Callable[[], object], second: Callable[[], object], cycles: int) -> float:
    gc.collect()
    started = time.thread_time_ns()
    for _ in range(cycles):
        first()
        second()
    return (time.thread_time_ns() - started) / cycles / 1000.0


def _floor(
    lock: Any, instruments: Any, labels: Any, spans: bool
) -> tuple[Callable[[], object], ...]:
    """The cycle with the hooks off, then the SDK calls the hooks make, made directly: the
    two records (wait and hold) and, with ``spans``, the acquire span's."""
    from opentelemetry import trace

    wait, hold = instruments.wait, instruments.hold
    acquired, common = labels.outcome["acquired"], labels.common
    tracer = trace.get_tracer_provider().get_tracer("lockkit")

    def second() -> None:
        lock.release()
        if spans:
            span = tracer.start_span("lockkit.acquire", attributes=common)
            span.set_attribute("lockkit.outcome", "acquired")
            span.set_attribute("lockkit.token", 1)
            span.end()
        wait.record(0.001, acquired)
        hold.record(0.001, common)

    return lock.acquire, second


def measure(setup: str, cycles: int, rounds: int) -> dict[str, list[float]]:
    """Microseconds per cycle, one number a round, for ``off`` and each mode of ``setup``."""
    from lockkit_core import LockKit, observe

    _install(setup)
    instruments = observe._instruments
    assert instruments is not None
    kit = LockKit("memory://telemetry-bench", namespace="bench", auto_renew=False)
    lock = kit.lock("order:42")
    labels = kit.labels
    took: dict[str, list[float]] = {"off": []}
    for _ in range(rounds + 1):  # the first round of each warms up
        for mode in ("off", *SETUPS[setup]):
            floor = mode.endswith("floor")
            first, second = (
                _floor(lock, instruments, labels, mode == "spans floor")
                if floor
                else (lock.acquire, lock.release)
            )
            observe._instruments = None if floor or mode == "off" else instruments
            took.setdefault(mode, []).append(_round(first, second, cycles))
    kit.close()
    return {mode: values[1:] for mode, values in took.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--setup", choices=SETUPS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setup:
        print(json.dumps(measure(args.setup, args.cycles, args.rounds)))
        return
    from importlib import metadata

    sdk = metadata.version("opentelemetry-sdk")  # its record() cost changes between releases
    print(f"acquire+release on memory://, {args.cycles} cycles x {args.rounds} rounds, µs/cycle")
    print(f"opentelemetry-sdk {sdk}")
    print(f"load average before: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    print(f"{'process':<10} {'mode':<10} {'off':>8} {'on':>8} {'added':>8}")
    for setup in SETUPS:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.telemetry", "--setup", setup,
             "--cycles", str(args.cycles), "--rounds", str(args.rounds)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        results = json.loads(out)
        off = statistics.median(results.pop("off"))
        for mode, took in results.items():
            on = statistics.median(took)
            print(f"{setup:<10} {mode:<10} {off:8.2f} {on:8.2f} {on - off:8.2f}")


if __name__ == "__main__":
    main()
