"""``lockkit top``: a live terminal view of the held locks, for whoever is on call when work
stalls. Every second it lists the locks under a prefix (``kit.admin.list``): key, holder,
owner hint, fencing token, time left, age and, where the store can count them, waiters.
``q`` or Ctrl-C quits. It needs rich (``pip install "lockkit[top]"``).

Keys and holders are shown as plain text (never as rich markup) with their control
characters escaped, like every other human output of the ``lockkit`` commands.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .admin import LockInfo, age_text
from .errors import LockKitError
from .terminal import printable

if TYPE_CHECKING:
    from rich.console import RenderableType

    from .kit import LockKit

__all__ = ["HEADERS", "render", "run_top"]

HEADERS = ("KEY", "HOLDER", "OWNER", "TOKEN", "TTL LEFT", "AGE", "WAITERS")


def _cells(info: LockInfo, now: float) -> tuple[str, ...]:
    left = "-" if info.ttl_remaining is None else f"{info.ttl_remaining:.1f} s"
    return (
        printable(info.key),
        printable(info.holder or "-"),
        printable(info.owner_hint),
        "-" if info.token is None else str(info.token),
        left,
        age_text(info.age(now)),
        "-" if info.waiters is None else str(info.waiters),
    )


def render(
    title: str, infos: list[LockInfo] | None, now: float, error: str | None = None
) -> RenderableType:
    """One frame: ``title``, then the table of ``infos`` oldest first (None: the listing
    failed with ``error``, shown instead)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    stamp = time.strftime("%H:%M:%S", time.localtime(now))
    count = "" if infos is None else f" · {len(infos)} held"
    head = Text(f"{title}{count} · {stamp} · q quits", style="bold")
    if infos is None:
        return Group(head, Text(f"cannot list locks: {printable(error or '')}", style="red"))
    table = Table(expand=False, header_style="bold")
    for name in HEADERS:
        table.add_column(name, no_wrap=True, justify="right" if name == "WAITERS" else "left")
    # The longest held first: that is the one an operator is looking for.
    for info in sorted(infos, key=lambda i: (i.started is None, i.started or 0.0, i.key)):
        table.add_row(*(Text(cell) for cell in _cells(info, now)))
    if not infos:
        return Group(head, Text("no locks held"))
    return Group(head, table)


@contextlib.contextmanager
def _keys() -> Iterator[bool]:
    """Read single key presses from a terminal stdin (cbreak mode, restored on the way out);
    yields False when stdin is not a terminal (then only Ctrl-C quits)."""
    if not sys.stdin.isatty():
        yield False
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _quit_pressed(interactive: bool, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds; True if ``q`` was pressed meanwhile."""
    if not interactive:
        time.sleep(timeout)
        return False
    deadline = time.monotonic() + timeout
    fd = sys.stdin.fileno()
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if ready and os.read(fd, 1) in (b"q", b"Q"):
            return True
    return False


def run_top(kit: LockKit, prefix: str, interval: float) -> None:
    """Show the locks under ``prefix`` on ``kit``'s store, refreshed every ``interval``
    seconds, until ``q`` or Ctrl-C."""
    from rich.console import Console
    from rich.live import Live

    title = f"lockkit top · {kit.admin.backend_info().url}"
    if kit.namespace:
        title += f" · namespace {printable(kit.namespace)}"
    if prefix:
        title += f" · prefix {printable(repr(prefix))}"
    console = Console()
    with (
        contextlib.suppress(KeyboardInterrupt),
        _keys() as interactive,
        Live(console=console, screen=True, auto_refresh=False) as live,
    ):
        while True:
            try:
                frame = render(title, kit.admin.list(prefix), time.time())
            except LockKitError as exc:  # the store is down: say so, keep looking
                frame = render(title, None, time.time(), str(exc))
            live.update(frame, refresh=True)
            if _quit_pressed(interactive, interval):
                return
