"""This process as the lock layer sees it: its id and the owner tokens it hands out, both
kept right across ``fork()``.

Every acquire and release asks for them, and both cost a system call each time when asked
of the OS (``os.getpid()``, ``os.urandom()``): the id is cached and refreshed in a forked
child, the tokens are drawn from ``os.urandom`` 64 at a time and the unused ones dropped in
a forked child (two processes handing out the same owner token would both believe they
hold the same lock). :mod:`random` reseeds itself on fork through the same hook.
"""

from __future__ import annotations

import os
import threading

__all__ = ["TOKENS_PER_DRAW", "new_owner_token", "pid"]

#: owner tokens drawn from ``os.urandom`` in one call
TOKENS_PER_DRAW = 64
_pid = [os.getpid()]  # a list: updated in place after a fork
#: unused tokens; ``list.pop`` and ``list.extend`` are atomic, so threads never share one
_tokens: list[str] = []


def pid() -> int:
    """``os.getpid()``, without the system call."""
    return _pid[0]


_here = threading.local()


class ThreadMark:
    """The running thread's own object (see :func:`thread_mark`)."""

    __slots__ = ("__weakref__",)


def thread_mark() -> ThreadMark:
    """An object of the running thread's own, dropped when the thread exits (a weak
    reference to it then answers None). Not the thread object: a thread not started by
    :mod:`threading` that gets a dead one's ident gets its dummy ``Thread`` too, which never
    says it exited; a thread-local dies with its thread, whoever started it."""
    try:
        mark: ThreadMark = _here.mark
    except AttributeError:
        mark = _here.mark = ThreadMark()
    return mark


def new_owner_token() -> str:
    """A fresh, unguessable 128-bit owner token (32 hex digits), from ``os.urandom``."""
    try:
        return _tokens.pop()
    except IndexError:
        drawn = os.urandom(16 * TOKENS_PER_DRAW).hex()
        _tokens.extend([drawn[i : i + 32] for i in range(0, len(drawn), 32)])
        return _tokens.pop()


def _after_fork_in_child() -> None:
    _pid[0] = os.getpid()
    _tokens.clear()  # the parent may hand them out too


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
