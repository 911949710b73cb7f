"""``kits_on()``: several kits on one store and namespace, as separate processes would have them
(each with its own clients), all closed afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from lockkit_core import LockKit


@contextmanager
def kits_on(url: str, namespace: str, count: int) -> Iterator[list[LockKit]]:
    """``count`` kits on ``url`` under ``namespace``; every one made is closed on leaving,
    also when making a later one failed."""
    with ExitStack() as stack:
        yield [stack.enter_context(LockKit(url, namespace=namespace)) for _ in range(count)]
