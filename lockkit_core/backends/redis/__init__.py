"""``redis://``, ``rediss://`` (TLS) and ``unix://``: one Redis server through redis-py.

Every operation is one round trip: a Lua script (``lua/*.lua``, loaded once and run by
EVALSHA, reloaded on NOSCRIPT) that compares the owner token and acts atomically.

Waiting is a queue, not polling and not a stampede: a blocking caller that finds the key busy
joins the key's queue in the same script call; a release hands the lock straight to the oldest
live waiter (with a new fencing token) and publishes ``<owner>|<token>`` on that waiter's
process channel only. One listener thread per backend, subscribed to its own channel, wakes
the waiter named, which can start at once: the lock is already its own. So waiters are
served in arrival order (``fair=True`` comes for free), and a hand-over costs no extra round
trip and wakes no other process. Each wait is still bounded by the holder's remaining
lease, so a lost notice costs at most that long, and while the listener is reconnecting
waiters fall back to short backoff.

The stored keys are ``lockkit:{<namespace>:<key>}`` with ``:q`` and ``:e`` beside it for the
queue (the braces keep them in one cluster slot), the counter ``lockkit:fence`` (one per
database, so tokens strictly increase per key and no per-key counter is left behind; it
restarts from the server clock in microseconds if lost), and one notice channel per waiting
process, ``lockkit:w:<random>``.
"""

from .backend import RedisBackend

__all__ = ["RedisBackend"]
