"""``redis://``, ``rediss://`` (TLS) and ``unix:///path/redis.sock``: one Redis server through
redis-py; ``redis+sentinel://`` and ``redis+cluster://`` build on it.

Every operation is one round trip: one Lua script (``lua/lock.lua``, loaded once, run by
EVALSHA with the operation's name as its first argument, reloaded on NOSCRIPT) that compares
the owner and acts atomically. Task deduplication's start and end of a run
(``Backend.begin_run``/``end_run``) are one call of that script's ``batch`` over the locks of
several keys; a server in cluster mode refuses that (the keys are in different slots) and
gets one call per lock instead.

**Stored layout.** For a lock on ``<key>`` in namespace ``<ns>`` (``full = "<ns>:<key>"``, or
``<key>`` without a namespace) every key lives in the hash slot of the tag ``{<full>}``, so a
Redis Cluster serves each script on one node and no data moves when a deployment grows into one:

- ``lockkit:{<full>}``: the lease, a string ``<id>|<token>|<started>|<holder>`` whose PX is
  the lease; ``<started>`` (server ms of the grant) and ``<holder>`` (``<hostname> pid
  <pid>``) are for the admin views.
- ``lockkit:{<full>}:f``: the key's last fencing token, kept one day after its last grant (a
  free key costs nothing after that).
- ``lockkit:{<full>}:q``: the wait queue, a sorted set of owner ids scored by arrival number
  (a counter, never a clock: a clock step cannot reorder waiters).
- ``lockkit:{<full>}:e``: a hash, owner id -> ``<expiry ms>|<lease ms>|<channel>|<holder>``
  for each queued waiter (``~<holder>`` for a ``fair=False`` one), and the queue's barging
  state (``t``, ``n``, ``h``, ``w``, ``l``, ``s``; see ``lua/lock.lua``).
- ``lockkit:{<full>}:g:<owner id>``: a list holding the token handed to a queued
  ``fair=True`` waiter, which blocks on it (BLPOP); it lives one lease at most.
- ``lockkit:{<full>}:rw:h|q|w`` and ``:sem:h|q|w``: the holders, queue and queue entries of
  the key's read-write lock and semaphore (``lua/shared.lua``, :mod:`.shared`).
- ``lockkit:w:<random>``: the notice channel of one waiting process (pub/sub, not a key).

A key whose text makes the tag empty (``full`` starting with ``}``) would spread its keys over
slots on a cluster; keys come from the namespace first, so give clusters a namespace.

**Owner secrets.** The 32-character owner token never reaches the server's data or its
messages: records, queue members and notices carry the owner *id*, the secret's SHA-1 in 40
hex digits (``backends.base.owner_id``; its first 8 are the hint ``lockkit list`` shows).
Release, extend, adopt and leave present the secret itself, which the script hashes and
compares; acquire sends only the id. What remains exposed: those four commands' arguments,
to anyone allowed ``MONITOR`` (and to ``SLOWLOG`` if a call is slow). Deny them to the
application's user, e.g. an ACL with ``-monitor -slowlog``; a user that may run ``DEL`` on
the keys can break any lock anyway.

**Fencing tokens.** A grant's token is ``max(last token of the key + 1, server TIME in µs,
floor + 1)``, where the floor is the highest token this client (one ``LockKit``) has seen on
any key. So tokens strictly increase per key while the counter exists; after the counter is lost
(its day of idleness, or a restart that lost the data) they still increase unless the server
clock is behind by more than the time since that key's last grant, and even then for every
client that saw a higher token. Strictly monotonic across every restart only with
``appendonly yes`` and ``appendfsync always`` on a server whose data survives; otherwise a
restart (``appendfsync everysec`` loses up to a second of writes, RDB snapshots more) or a
failover to an asynchronous replica can hand out a token below one already issued, if the clock
of the server that answers is behind as well, to a client that never saw the higher one.

**Waiting.** A blocking caller that finds the key busy joins its queue in the same call. Its
queue entry outlives the holder's remaining lease (which the caller is told, and after which it
tries again, renewing the entry), whatever either side's ttl. A release hands the lock straight
to the oldest waiter (with a new token) and publishes ``<id>|<token>`` on that waiter's
process channel only; one listener thread per backend wakes the waiter, which owns the lock
already: waiters are served in arrival order and a hand-over costs no extra round trip.

**Bounded barging** (``fair=False``, the default). Handing over on every release switches
process on every critical section; a releaser that asks again at once would take the lock with
no switch. So while the queue's head is a ``fair=False`` waiter that has been the head for less
than ``BARGE_MS`` (10 ms) and was passed over fewer than ``BARGE_MAX`` (32) times, and no
``fair=True`` waiter has joined, a release only frees the lock, and a blocking ``fair=False``
caller *of the process that released it* (``<host> pid <pid>``) may take it back. Another
process asking then queues as if the lock were held: two processes taking turns past the queue
would switch on every section again. The head is never told "free" to race the releaser: it is
told when to ask (``<id>|@<ms>``: ``PAUSE_MS``, 2 ms, after the release) or its busy answer says
so (when its time as the head is up: ``RedisWaiter.ask_at``); past the bounds the next release
hands over in order. So a lock freed that way and taken by nobody waits about 2 ms for the head,
and each waiter ahead adds at most about 10 ms to a ``fair=False`` wait. Waiters behind such a
head ask again at least every second, in case the head dies while the lock sits free; a head
that gave up in an outage is left for by its process as soon as the server answers. The
server clock only moves the 10 ms bound: a clock stepped back is bounded by the count.

A notice nobody receives (PUBLISH counts 0: the waiter's process died, or its listener is
reconnecting) is not waited on: the next waiter is served in the same call, and a live waiter
skipped that way queues again on its next attempt. The listener checks its connection (PING)
after half a second of silence and reconnects when no answer comes within half a second, so a
half-open link costs a waiter about a second; while it is down, waiters poll with short backoff.
A waiter that gives up (its timeout, or an outage) returns at once; its process leaves the queue
for it from a background thread (``leaver.py``), as soon as the server answers; the leave also
passes on a lock handed to it meanwhile. An attempt whose caller got ``BackendUnavailable``
may still reach the server when the link heals (TCP delivers it late) and take the key for an
owner that is gone: that thread gives back (``leave``) what such attempts may have taken, once
a second, for a minute plus two ttls after each (an owner token serves one acquisition), with
no other call needed.

On Redis Cluster (``redis+cluster://``, :mod:`.cluster`) the channel is one per key waited on,
in the key's slot (``lockkit:{<full>}:w:<random>``), and notices go by ``SPUBLISH`` to the node
serving that slot only; ``redis+sentinel://`` (:mod:`.sentinel`) follows the master the
sentinels name. How the clients are made (from a URL, or from the app's own client for
``LockKit.from_redis``) is :mod:`.clients`; TLS option checks are :mod:`.connect`. A
``PSUBSCRIBE`` matching ``lockkit:w:*`` counts as a receiver and hides a dead waiter until its
entry expires.
"""

from .backend import RedisBackend

__all__ = ["RedisBackend"]
