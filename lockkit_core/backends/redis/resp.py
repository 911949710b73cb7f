"""The RESP2 replies of the lock operations, parsed from the bytes that arrived.

Both command paths (:mod:`.wire`, blocking, and :mod:`.aio_wire`, asyncio) read a whole reply
with :func:`parse_reply`: the script's replies are a few short lines, so parsing them from one
buffer costs a fraction of redis-py's general reader (a line-by-line socket buffer, per-type
response callbacks). Values come back as redis-py gives them without ``decode_responses``, and
error replies as the exceptions redis-py makes of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["INCOMPLETE", "ErrorParser", "parse_reply"]

#: a reply not complete yet (distinct from a nil reply, None)
INCOMPLETE: Any = object()

ErrorParser = Callable[[str], Exception]


def parse_reply(buf: bytes, pos: int, error: ErrorParser) -> tuple[Any, int]:
    """One RESP2 reply from ``buf`` at ``pos``, and the position after it; ``INCOMPLETE``
    (and ``pos``) if it has not all arrived. Bulk strings stay bytes, as redis-py gives them
    without ``decode_responses``; an error reply is the exception ``error`` makes of its
    message (redis-py's own classes), returned, not raised."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return INCOMPLETE, pos
    kind, line, after = buf[pos], buf[pos + 1 : end], end + 2
    if kind == 42:  # '*'
        return _array(buf, pos, int(line), after, error)
    if kind == 36:  # '$'
        size = int(line)
        if size < 0:
            return None, after
        if len(buf) < after + size + 2:
            return INCOMPLETE, pos
        return buf[after : after + size], after + size + 2
    return _simple(kind, line, error), after


def _array(buf: bytes, pos: int, count: int, after: int, error: ErrorParser) -> tuple[Any, int]:
    if count < 0:
        return None, after
    items = []
    for _ in range(count):
        item, after = parse_reply(buf, after, error)
        if item is INCOMPLETE:
            return INCOMPLETE, pos
        items.append(item)
    return items, after


def _simple(kind: int, line: bytes, error: ErrorParser) -> Any:
    if kind == 58:  # ':'
        return int(line)
    if kind == 43:  # '+'
        return line
    if kind == 45:  # '-'
        return error(line.decode("utf-8", "replace"))
    if kind == 95:  # '_': RESP3's null, on a connection that negotiated it
        return None
    from redis.exceptions import InvalidResponse

    raise InvalidResponse(f"lockkit: unexpected reply type {chr(kind)!r}")
