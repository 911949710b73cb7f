"""Plain-text tables, the verdict on lockkit's targets, and the JSON report."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTENTION",
    "MANY_KEYS",
    "UNCONTENDED",
    "Column",
    "check_targets",
    "render_table",
    "with_ratio",
    "write_json",
]

Row = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """A table column: header, and how to turn a row into its cell."""

    header: str
    cell: Callable[[Row], str]
    left: bool = False


def _number(key: str, digits: int = 1, scale: float = 1.0) -> Callable[[Row], str]:
    def cell(row: Row) -> str:
        value = row.get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        return f"{value * scale:,.{digits}f}"

    return cell


def _percent(key: str) -> Callable[[Row], str]:
    def cell(row: Row) -> str:
        value = row.get(key)
        return "-" if value is None or math.isnan(value) else f"{value * 100:.0f}%"

    return cell


def _text(key: str) -> Callable[[Row], str]:
    return lambda row: str(row.get(key, ""))


def render_table(title: str, columns: Sequence[Column], rows: Sequence[Row]) -> str:
    """Aligned plain text; a failed row shows its error after the library name."""
    first, rest = columns[0], columns[1:]
    body: list[list[str]] = []
    errors: dict[int, str] = {}
    for i, row in enumerate(rows):
        body.append([first.cell(row)] + (["" for _ in rest] if "error" in row else []))
        if "error" in row:
            errors[i] = f"failed: {row['error']}"
        else:
            body[-1] += [column.cell(row) for column in rest]
    widths = [
        max([len(column.header)] + [len(cells[j]) for cells in body if j < len(cells)])
        for j, column in enumerate(columns)
    ]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.ljust(width) if column.left else cell.rjust(width)
            for cell, width, column in zip(cells, widths, columns, strict=False)
        ]
        return "  ".join(parts).rstrip()

    out = [title, line([c.header for c in columns]), "  ".join("-" * w for w in widths)]
    for i, cells in enumerate(body):
        out.append(line(cells[:1]) + "  " + errors[i] if i in errors else line(cells))
    return "\n".join(out)


def with_ratio(rows: Sequence[Row], baseline: str, key: str, out: str) -> list[Row]:
    """Copy ``rows`` adding ``out`` = row[key] / baseline's row[key]."""
    base = next((r.get(key) for r in rows if r["library"] == baseline), None)
    result = []
    for row in rows:
        value = row.get(key)
        ratio = value / base if base and value is not None else None
        result.append({**row, out: ratio})
    return result


def _signed(key: str) -> Callable[[Row], str]:
    def cell(row: Row) -> str:
        value = row.get(key)
        return "-" if value is None or math.isnan(value) else f"{value:+,.1f}"

    return cell


UNCONTENDED = (
    Column("library", _text("library"), left=True),
    Column("cycles", _number("cycles", 0)),
    Column("mean us", _number("mean_us")),
    Column("p50 us", _number("p50_us")),
    Column("p99 us", _number("p99_us")),
    Column("x base mean", _number("ratio_mean", 2)),
    Column("x base p50", _number("ratio_p50", 2)),
    Column("+ base mean us", _signed("over_mean_us")),
    Column("+ base p50 us", _signed("over_p50_us")),
)

CONTENTION = (
    Column("library", _text("library"), left=True),
    Column("CS/s", _number("per_second", 0)),
    Column("sections", _number("sections", 0)),
    Column("wait p50 ms", _number("wait_p50", 2, 1e3)),
    Column("wait p99 ms", _number("wait_p99", 1, 1e3)),
    Column("wait max ms", _number("wait_max", 1, 1e3)),
    Column("handoffs", _percent("handoff_share")),
    Column("overlaps", _number("overlaps", 0)),
    Column("per proc", lambda r: f"{r['per_process_min']}-{r['per_process_max']}"),
    Column("x peer CS/s", _number("ratio_rate", 2)),
    Column("x peer max wait", _number("ratio_wait_max", 3)),
    Column("waits by", _text("waits_by"), left=True),
)

MANY_KEYS = (
    Column("library", _text("library"), left=True),
    Column("cycles/s", _number("per_second", 0)),
    Column("total s", _number("seconds", 3)),
    Column("mean us", _number("mean_us")),
    Column("x base time", _number("ratio_time", 2)),
)


def _find(rows: Sequence[Row], name: str) -> Row | None:
    row = next((r for r in rows if r["library"] == name), None)
    return None if row is None or "error" in row else row


def check_targets(results: Mapping[str, Mapping[str, Sequence[Row]]]) -> list[Row]:
    """lockkit's targets from the design issue, judged on this run's numbers, once per run
    (``results`` maps a run's label, "redis, same" or "file", to its tables)."""
    verdicts: list[Row] = []
    for label, tables in results.items():
        if label.startswith("redis"):
            verdicts += _redis_targets(label, tables)
        else:
            verdicts += _file_targets(label, tables)
    return verdicts


def _verdict(run: str, target: str, met: bool | None, detail: str) -> Row:
    state = "not measured" if met is None else ("MET" if met else "MISSED")
    return {"run": run, "target": target, "verdict": state, "detail": detail}


def _redis_targets(run: str, tables: Mapping[str, Sequence[Row]]) -> list[Row]:
    out = []
    ours = _find(tables.get("uncontended", []), "lockkit")
    target = "uncontended cycle within 1.15x of the raw floor"
    if ours and ours.get("ratio_mean") is not None:
        mean, p50 = ours["ratio_mean"], ours["ratio_p50"]
        over = ours["over_mean_us"]
        peer = _find(tables.get("uncontended", []), "redis-py Lock")
        theirs = (
            f"; redis-py Lock {peer['ratio_mean']:.2f}x, {peer['over_mean_us']:+.1f} us"
            if peer and peer.get("ratio_mean") is not None
            else ""
        )
        detail = f"mean {mean:.2f}x ({over:+.1f} us/cycle), p50 {p50:.2f}x{theirs} (paired runs)"
        out.append(_verdict(run, target, mean <= 1.15, detail))
    else:
        out.append(_verdict(run, target, None, "a row is missing"))

    peer = _find(tables.get("contention", []), "redis-py Lock")
    ours = _find(tables.get("contention", []), "lockkit")
    target = "contended: >= redis-py's CS/s and max wait <= 1/10 of redis-py's"
    if peer and ours:
        faster = ours["per_second"] >= peer["per_second"]
        calmer = ours["wait_max"] * 10 <= peer["wait_max"]
        out.append(
            _verdict(
                run,
                target,
                faster and calmer and ours["overlaps"] == 0,
                f"CS/s {ours['per_second']:.0f} vs {peer['per_second']:.0f}; max wait "
                f"{ours['wait_max'] * 1e3:.1f} ms vs {peer['wait_max'] * 1e3:.1f} ms; "
                f"overlaps {ours['overlaps']}",
            )
        )
    else:
        out.append(_verdict(run, target, None, "a row is missing"))
    return out


def _file_targets(run: str, tables: Mapping[str, Sequence[Row]]) -> list[Row]:
    ours = _find(tables.get("uncontended", []), "lockkit file://")
    target = "file uncontended at least as fast as filelock"
    if ours and ours.get("ratio_mean") is not None:
        ratio = ours["ratio_mean"]
        detail = (
            f"mean {ours['mean_us']:.1f} us vs {ours['base_mean_us']:.1f} us in the same "
            f"processes ({ratio:.2f}x)"
        )
        return [_verdict(run, target, ratio <= 1.0, detail)]
    return [_verdict(run, target, None, "lockkit file:// did not run")]


def write_json(path: str, report: Mapping[str, Any]) -> None:
    """The whole run, numbers unrounded; NaN becomes null."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, Mapping):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    with open(path, "w", encoding="utf-8") as out:
        json.dump(clean(report), out, indent=2)
        out.write("\n")
