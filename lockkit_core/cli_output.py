"""What the ``lockkit`` commands print: tables, JSON, and the sentences every framework's shares."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Sequence
from typing import Any

import click

from .admin import LockInfo, age_text
from .terminal import printable

__all__ = [
    "LOCK_HEADERS",
    "emit_json",
    "free_line",
    "lock_rows",
    "no_locks_line",
    "refusal",
    "released_line",
    "render_table",
]


def emit_json(value: Any) -> None:
    """Print ``value`` as indented JSON with sorted keys (the ``--json`` output)."""
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


LOCK_HEADERS = ("KEY", "TOKEN", "TTL LEFT", "AGE", "HOLDER", "OWNER HINT")


def lock_rows(infos: Sequence[LockInfo]) -> list[list[str]]:
    """One table row per lock, in :data:`LOCK_HEADERS` order; the framework commands share it."""
    now = time.time()
    return [
        [
            printable(info.key),
            "-" if info.token is None else str(info.token),
            _seconds(info.ttl_remaining),
            age_text(info.age(now)),
            printable(info.holder or "-"),
            printable(info.owner_hint),
        ]
        for info in infos
    ]


# The sentences every framework's command prints (keys escaped for the terminal).


def no_locks_line(prefix: str) -> str:
    """What ``list`` prints when no lock is held under ``prefix``."""
    return "no locks held" + (f" under {printable(repr(prefix))}" if prefix else "")


def free_line(key: str) -> str:
    """What ``info`` prints for a free key."""
    return f"{printable(key)} is free"


def released_line(key: str, before: LockInfo | None, released: bool) -> str:
    """What ``release --force`` prints: whether ``key`` was freed, and whose lock it was."""
    shown = printable(key)
    if not released:
        return f"{shown} was already free"
    if before is None:
        return f"released {shown}"
    token = "" if before.token is None else f", token {before.token}"
    return f"released {shown} (owner {printable(before.owner_hint)}{token})"


def refusal(key: str, command: str) -> str:
    """Why ``release`` without ``--force`` did nothing, and the ``command`` line that would."""
    return printable(
        f"refusing to release {key!r} without --force: its holder is not told and may go on "
        f"as if it still held the lock. Run '{command} release {shlex.quote(key)} --force' if "
        "you mean it."
    )
