"""Where a queued owner stands: the holder's lease judged on the server's clock, and the
node just ahead watched (one round trip for both watches)."""

from __future__ import annotations

from ..base import Grant
from .nodes import NodeData, remaining_ms
from .session import Steps
from .tree import LockTree, Mine, op
from .waiter import ZooKeeperWaiter

__all__ = ["behind"]


def behind(
    tree: LockTree,
    key: str,
    mine: Mine,
    waiter: ZooKeeperWaiter | None,
    head_name: str,
    ahead_name: str,
    index: int,
    session_timeout: float,
) -> Steps[Grant | None]:
    """The answer for an owner whose node is at ``index`` (> 0) in ``key``'s queue, behind
    ``ahead_name``, ``head_name`` first; None to look again (the queue changed). Without a
    ``waiter`` (a single try), our node is deleted before the "busy" answer."""
    from kazoo.exceptions import NoNodeError

    parent = tree.parent(key)
    head = f"{parent}/{head_name}"
    if waiter is None:
        try:
            raw, stat = yield from tree.call(f"read the holder of {key!r}", op("get_async", head))
        except NoNodeError:
            return None
    else:
        # Watch the node just ahead of us, for its deletion (a child watch) and for its
        # claim (a data watch): see waiter.py. One round trip for both.
        ahead = f"{parent}/{ahead_name}"
        wake = waiter.watching(ahead, holds=index == 1)
        got, listed = yield from tree.call_all(
            f"watch the queue of {key!r}",
            op("get_async", ahead, wake),
            op("get_children_async", ahead, wake),
        )
        if isinstance(got, NoNodeError) or isinstance(listed, NoNodeError):
            return None
        raw, stat = got
        waiter.saw(ahead, NodeData.decode(raw).term_ms)
        if index > 1:
            # Further back in the queue: only the node ahead matters (the holder's lease
            # is the business of the one right behind it).
            return Grant(False, retry_after=session_timeout)
    left = remaining_ms(stat.mtime, NodeData.decode(raw).lease_ms, tree.server_now())
    if left is not None and left <= 0:
        # The holder's lease ran out on the server's clock (it stopped renewing):
        # remove its node, unless it renewed meanwhile (the version says so).
        yield from tree.delete(head, stat.version)
        return None
    retry_after = None if left is None else left / 1000.0
    if waiter is None:
        yield from tree.delete(mine.path)
        return Grant(False, retry_after=retry_after)
    return Grant(False, retry_after=retry_after or session_timeout)
