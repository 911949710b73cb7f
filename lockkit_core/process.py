"""This process as the lock layer sees it: its id and the owner tokens it hands out, both
kept right across ``fork()``, including a fork made below Python.

Owner tokens are drawn from ``os.urandom`` 64 at a time (one system call rather than one per
acquisition). Two processes handing out the same owner token would both believe they hold
the same lock, so the unused ones belong to the process that drew them: a process whose id
is not the drawer's drops them first. The id is asked of the OS each time, never cached: a C
extension or server that forks without ``PyOS_AfterFork_Child`` (uWSGI without
``--py-call-uwsgi-fork-hooks``) runs no ``os.register_at_fork`` hook in the child.
"""

from __future__ import annotations

import os
import threading

__all__ = ["TOKENS_PER_DRAW", "new_owner_token", "pid"]

#: owner tokens drawn from ``os.urandom`` in one call
TOKENS_PER_DRAW = 64
#: unused tokens; ``list.pop`` and ``list.extend`` are atomic, so threads never share one
_tokens: list[str] = []
_drawn_by = [os.getpid()]  # the process the unused tokens are for

#: this process's id (``os.getpid``: asked every time, see the module docstring)
pid = os.getpid


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
    me = os.getpid()
    if _drawn_by[0] != me:  # a forked child: the parent's tokens are the parent's
        _tokens.clear()
        _drawn_by[0] = me
    try:
        return _tokens.pop()
    except IndexError:
        drawn = os.urandom(16 * TOKENS_PER_DRAW).hex()
        _tokens.extend([drawn[i : i + 32] for i in range(0, len(drawn), 32)])
        return _tokens.pop()
