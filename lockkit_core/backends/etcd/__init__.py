"""``etcd://host1:2379,host2:2379,host3:2379``: an etcd v3 cluster, through any member.

The client is :mod:`.client`, a small typed client for etcd's v3 JSON gateway on the standard
library's ``http.client`` (no driver to install): every request has a budget of one socket
timeout across the members, so an unreachable cluster is a ``BackendUnavailable`` within the
caller's timeout plus one socket timeout, never a hang and never "busy". Options (URL query or
``OPTIONS``): ``socket_timeout`` (5 s), ``connect_timeout`` (2 s), ``username``/``password``
(or ``etcd://USER:PASSWORD@...``), ``tls``, ``ca_file``, ``cert_file``, ``key_file``.

**Stored layout.** The lock on ``<key>`` (namespaced) is the record ``lockkit/l/<key>``, whose
value is JSON ``{"owner": <owner id>, "ttl": <seconds>, "holder": "<host> pid <pid>",
"started": <epoch seconds of the grant, the holder's clock>}`` (the owner *id* is the SHA-1
of the secret token, ``backends.base.owner_id``; the token itself never reaches the store),
attached to a lease of the holder's own. Waiters queue as ``lockkit/q/<sha1 of key>/<owner
id>``, each on a short lease. A free key has no record and no queue entries: it costs nothing.

**Acquiring** is one transaction: if the record does not exist (and nobody queues
before us) put it under our lease, else read it. The fencing token is the record's create
revision, strictly increasing across the cluster (also across restarts and leader changes:
revisions are part of the replicated log), or, for a record handed over in place (below),
the token in its value. Releasing revokes our lease, and the record goes with it.

**Leases and ttls.** etcd leases count whole seconds (at least about 2 s, checked every half
second), so the server's lease is only the backstop for a holder that vanished: it is granted
a second longer than the ttl and kept alive by renewals. The ttl itself is enforced by
observation: a holder renews by rewriting its record (a new mod revision), and a contender
that has seen the *same* revision for the record's ttl (on its own monotonic clock, counted
from when it first saw it) knows the holder's lease is over: the holder counts its lease from
before the write it made, which came before our first sight of it. It then deletes the record
if that revision is still current (a compare on the mod revision) and revokes the old lease,
so the old holder's next renewal fails and it learns that it lost the lock. No clocks are
compared between machines.

**Waiting.** Every blocking caller joins the key's queue on its first failed attempt
(``lockkit/q/...``, ordered by create revision, on a short lease its waiting thread keeps
alive) and watches only the entry just before its own, or the record once it is first: a
release wakes one waiter, and waiters are served in the order they asked (``fair=True`` comes
for free; a non-blocking attempt never overtakes a queued waiter). Watches start from the
revision the last look saw, so no release is missed; a waiter's lease is granted ahead, so
the attempt after a release is one round trip. Leases of failed attempts and of waiters that
give up are revoked; if the store is unreachable at that moment, by a background thread that
tries again every second until it answers, with no other call needed (an attempt sent before
the outage may still arrive when the link heals, and would otherwise take the key for a caller
that is gone, for the lease's whole TTL).

**On an event loop** the waiters of one key stand in a line on the loop: each is queued as
it asks, many per transaction, but only the first tries and watches; a release on that loop
hands the lock to it in place, in one transaction (:mod:`.line`, :mod:`.batch`,
:mod:`.handover`).
"""

from .backend import EtcdBackend

__all__ = ["EtcdBackend"]
