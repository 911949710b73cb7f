"""This process as the lock layer sees it: its id and the owner tokens it hands out, both
kept right across ``fork()``, including a fork made below Python, and what else the lock
layer must redo in a forked child (:func:`after_fork`).

Owner tokens are drawn from ``os.urandom`` 64 at a time (one system call rather than one per
acquisition). Two processes handing out the same owner token would both believe they hold
the same lock, so the unused ones belong to the process that drew them: a process whose id
is not the drawer's drops them first. The id is asked of the OS each time, never cached: a C
extension or server that forks without ``PyOS_AfterFork_Child`` (uWSGI without
``--py-call-uwsgi-fork-hooks``) runs no ``os.register_at_fork`` hook in the child. So the
callbacks of :func:`after_fork` run from that hook where there is one, and otherwise when the
child first asks for an owner token (:func:`check_fork`: every acquisition does), before it
relies on its parent's renewal thread or connections.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["TOKENS_PER_DRAW", "after_fork", "check_fork", "new_owner_token", "pid"]

#: owner tokens drawn from ``os.urandom`` in one call
TOKENS_PER_DRAW = 64
#: unused tokens; ``list.pop`` and ``list.extend`` are atomic, so threads never share one
_tokens: list[str] = []
_seen = [os.getpid()]  # the process the state above (and the after_fork callbacks') is for
_after_fork: list[Callable[[], None]] = []

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
    check_fork()
    try:
        return _tokens.pop()
    except IndexError:
        drawn = os.urandom(16 * TOKENS_PER_DRAW).hex()
        _tokens.extend([drawn[i : i + 32] for i in range(0, len(drawn), 32)])
        return _tokens.pop()


def after_fork(callback: Callable[[], None]) -> None:
    """Run ``callback`` in every forked child, before the lock layer uses there what the
    parent made (threads, queues, connections): see the module docstring."""
    _after_fork.append(callback)


def check_fork() -> None:
    """Redo what a forked child must (the tokens drawn ahead dropped, the :func:`after_fork`
    callbacks run, in order), once, if this process is not the one that last did."""
    me = os.getpid()
    if _seen[0] != me:
        _seen[0] = me
        _tokens.clear()  # the parent's: it may hand them out too
        for callback in list(_after_fork):
            callback()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=check_fork)
