"""The counting of a Redlock round, free of I/O: quorum, outcome, and how long to wait."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SPLIT_RETRY", "Tally", "quorum"]

#: after a split vote (some nodes granted, too few), the next attempt comes after a random
#: pause up to this long (seconds), so that the contenders that split do not split again
SPLIT_RETRY = 0.01


def quorum(nodes: int) -> int:
    """A majority of ``nodes``: two lock holders would need a node in common."""
    return nodes // 2 + 1


@dataclass(frozen=True)
class Tally:
    """What the nodes answered to one request: how many said yes, the remaining lease (ms,
    negative when unknown) of each that said busy, and how many could not be asked."""

    nodes: int
    yes: int
    busy_pttl_ms: Sequence[int]
    failed: int

    @property
    def won(self) -> bool:
        return self.yes >= quorum(self.nodes)

    @property
    def unreachable(self) -> bool:
        """Too few nodes answered for a quorum to be possible whatever they said."""
        return self.nodes - self.failed < quorum(self.nodes)

    @property
    def undecided(self) -> bool:
        """Too few yes, but enough nodes failed that the outcome is unknown."""
        return not self.won and self.yes + self.failed >= quorum(self.nodes)

    def retry_after(self) -> float | None:
        """Seconds before the next attempt may win without any notice: until enough of the
        busy nodes' leases run out for a majority of free ones (None: unknown), or, when a
        majority is free already (a split vote, given back), a random pause up to
        :data:`SPLIT_RETRY`, so that the contenders that split do not split again."""
        free = self.nodes - self.failed - len(self.busy_pttl_ms)
        need = quorum(self.nodes) - free
        if need <= 0:
            return random.uniform(0.1, 1.0) * SPLIT_RETRY
        ends = sorted(self.busy_pttl_ms)
        if need > len(ends) or ends[need - 1] < 0:
            return None
        # jitter, so that the waiters that were told the same time do not all ask at once
        return ends[need - 1] / 1000.0 + random.uniform(0.0, 1.0) * SPLIT_RETRY
