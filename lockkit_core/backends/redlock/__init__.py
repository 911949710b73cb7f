"""``redlock://h1:6379,h2:6379,h3:6379/0``: a lock held on a majority of independent Redis
masters (the Redlock algorithm), so that one of three nodes (two of five) may fail or be lost
without losing the lock or blocking new ones.

**Each node** is a :class:`~..redis.RedisBackend`: the same script (``lua/lock.lua``), stored
layout, queue and hand-over notices as ``redis://``. The nodes know nothing of each other.

**Acquire** (:meth:`RedlockBackend.try_acquire`): one request to every node at once
(:mod:`.fanout`), each answer awaited at most ``node_timeout`` (0.1 s by default, far below any
sensible ttl), so a dead node costs that much once. The lock is won with a majority
(``N // 2 + 1``, :mod:`.quorum`) of grants; its validity is ``ttl - elapsed - drift`` on the
monotonic clock read before the first request went out (the acquire state machine counts
it, and gives back a grant that arrived with its validity spent). Lost, every node that granted
or did not answer is told to release (a request that timed out may still have landed). Too few
nodes answering for a majority is ``BackendUnavailable``, never False.

**Waiting**: a blocking caller is queued on every node, as on ``redis://``; a release hands
each node's lock to its head and tells that waiter's process on pub/sub. Any notice wakes the
caller, whose next attempt asks every node again (a hand-over by one node is one vote, and a
notice is never proof of anything). Nodes may queue contenders in different orders; the
contender left short gives its nodes back and they pass to the next in line, so a split
settles within a round, and contenders that split without queues retry after a random pause
up to ``SPLIT_RETRY``. A holder whose lease ends without a release is noticed when the
lease runs out on a majority (the busy answers say when).

**Extend** succeeds only with a majority of nodes extending; **release** is sent to every node
and is True when a majority still held the lock. ``adopt`` likewise.

**No fencing token**: ``token`` is None and ``Capability.FENCING`` is not declared. Each node
numbers its own grants; no majority can agree on one increasing number without a consensus
round (see ``docs/backends/redlock.md``). **No fair mode**: each node queues in the order
requests reached it, and those orders can differ.

Admin reads (``list``, ``info``) show the leases a majority of nodes hold for one owner.
"""

from .backend import RedlockBackend

__all__ = ["RedlockBackend"]
