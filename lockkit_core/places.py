"""Who may take a place of a read-write lock or a semaphore now: the admission rule, pure.

The stores that keep their queues in this process's memory or in files (``memory://``, and
the tests of the Lua copy of the rule in ``backends/redis/lua/shared.lua``) decide with it.

Places are served first come, first served. Walking the queue from its head, each waiter is
let in while it is compatible with the holders and the waiters let in before it; the first
that is not stops the walk, so nobody behind it gets in either (a reader never passes a
waiting writer: no writer starves; a writer never passes waiting readers: no reader starves).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["admitted", "fits"]


def fits(mode: str, limit: int, holding: Sequence[str]) -> bool:
    """Whether a place of ``mode`` fits beside places of the modes ``holding``: a writer
    only alone, a reader beside readers, a semaphore's slot while fewer than ``limit`` are."""
    if mode == "write":
        return not holding
    if mode == "read":
        return "write" not in holding
    return len(holding) < limit


def admitted(holding: Sequence[str], queue: Iterable[tuple[str, str]], limit: int) -> list[str]:
    """The owners of ``queue`` (``(owner, mode)`` pairs, oldest first) that may take their
    places now beside the places of the modes ``holding``, in order."""
    modes = list(holding)
    let_in: list[str] = []
    for owner, mode in queue:
        if not fits(mode, limit, modes):
            break
        modes.append(mode)
        let_in.append(owner)
    return let_in
