"""The PNG charts of the results page (matplotlib, the ``bench`` dependency group)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt

Row = dict[str, Any]


def _ok(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if "error" not in r]


def _colour(library: str) -> str:
    return "tab:blue" if library.startswith("lockkit") else "tab:grey"


def uncontended(rows: Sequence[Row], path: Path) -> None:
    """Horizontal bars: p50 latency per library, lockkit's stores in blue, peers in grey."""
    rows = sorted(_ok(rows), key=lambda r: r["p50_us"])
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.2))
    names = [r["library"] for r in rows]
    ax.barh(names, [r["p50_us"] for r in rows], color=[_colour(n) for n in names])
    ax.errorbar([r["p50_us"] for r in rows], names, xerr=[[0] * len(rows),
                [r["p99_us"] - r["p50_us"] for r in rows]], fmt="none", ecolor="black")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("acquire + release, µs (bar: median, whisker: p99; log scale)")
    ax.set_title("Uncontended latency: lockkit per store and the peer libraries")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def contended(rows: Sequence[Row], path: Path) -> None:
    """Scatter: sections per second against the longest wait, one point per library."""
    rows = _ok(rows)
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in rows:
        ax.scatter(r["wait_max"] * 1e3, r["per_second"], color=_colour(r["library"]))
        ax.annotate(r["library"], (r["wait_max"] * 1e3, r["per_second"]), fontsize=7,
                    xytext=(4, 2), textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("longest wait for the lock, ms (log)")
    ax.set_ylabel("sections per second (log)")
    ax.set_title("One key, 8 processes: throughput against the longest wait")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fairness(rows: Sequence[Row], path: Path) -> None:
    """Bars from the fewest to the most sections one of the 8 processes got."""
    rows = _ok(rows)
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.2))
    names = [r["library"] for r in rows]
    low = [r["per_process_min"] for r in rows]
    high = [r["per_process_max"] for r in rows]
    ax.barh(names, [h - lo for h, lo in zip(high, low, strict=True)], left=low,
            color=[_colour(n) for n in names])  # fmt: skip
    ax.set_xlabel("sections one process got: fewest to most (a short bar is a fair hand-off)")
    ax.set_title("Hand-off fairness, one key, 8 processes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def contenders(rows: Sequence[Row], path: Path, counts: Sequence[int]) -> None:
    """Lines: median wait against the number of contending processes, per library."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for library in dict.fromkeys(r["library"] for r in rows):
        points = sorted((r["processes"], r["wait_p50"] * 1e3) for r in _ok(rows)
                        if r["library"] == library)  # fmt: skip
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=library,
                    linestyle="-" if library.startswith("lockkit") else "--")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(counts), [str(c) for c in counts])
    ax.set_yscale("log")
    ax.set_xlabel("contending processes")
    ax.set_ylabel("median wait, ms (log)")
    ax.set_title("Wait against the number of contenders")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw(result: dict[str, Any], out: Path, counts: Sequence[int]) -> None:
    """Write the four charts of the results page into ``out``."""
    uncontended(result["uncontended"], out / "benchmarks-uncontended.png")
    contended(result["contention"], out / "benchmarks-contended.png")
    fairness(result["contention"], out / "benchmarks-fairness.png")
    contenders(result["scaling"], out / "benchmarks-contenders.png", counts)
