"""``zookeeper://host1:2181,host2:2181/chroot``: a ZooKeeper ensemble through kazoo.

**Nodes.** A key lives under ``<chroot>/lockkit/locks/k<percent-quoted key>``; each contender
is one ephemeral sequential child named ``<owner id>-<sequence>`` (the owner id is the SHA-1 of
the owner token, never the token), and the lowest sequence holds the lock. A free key takes the
parent and our node in one transaction (one round trip); the parent is removed again when the
last contender leaves, so a free key costs nothing. Node data is JSON: the lease in ms (0 while
queued), host, pid, thread and the time of the claim, which ``lockkit list``/``info`` show.

**Waiting.** A blocking caller keeps its node in the queue and watches only the node just ahead
of it, for its deletion (a child watch: an ephemeral node has no children) and for its claim (a
data watch: a lock node's data changes only when it claims or renews). So a waiter knows when
the node ahead holds the lock, and when that node is deleted it is first: it holds the lock on
the notice, with no request (no round trip after the release's notice). Its claim, which writes
its lease into its node, is sent 20 ms later (at most a tenth of the ttl), or, if it releases
first, in one transaction with the delete (see ``claims.py``): a short critical section costs
two writes, its create and its release. The claim fires the data watch of the waiter behind,
which only notes it; nobody else is woken. Order is arrival order, so ``fair=True`` costs
nothing; ``fair=False`` is FIFO as well. A queueing create lists the contenders in the same
round trip; a release on a contended key lists them (a read) before removing the parent.

**Fencing token.** The holder node's ``czxid``: zxids rise across the whole ensemble, across
restarts and when the key's parent is removed and made again (the sequence suffix would restart
then, so it is not used).

**Leases.** A node lives as long as its session: a holder that dies frees the key within the
session timeout (``session_timeout``, default 10 s). A per-lock ``ttl`` is honoured as well: the
holder's node carries its lease, stamped by the server's clock (``mtime``) on each claim or
renewal; a contender that finds the holder's lease over on the server's clock (as of its own
last write) removes that node with a version check, so a holder that renewed meanwhile keeps
it. ``auto_renew`` renews the lease; liveness is the session's. Exclusion by ttl therefore
trusts the leader's wall clock not to jump forward by more than the lease's drift margin;
exclusion by session does not depend on clocks. A node that only queues carries no lease and is
bound to its session alone, and so is a holder for the moment before its claim is sent: a
holder that stops renewing is removed at most that moment (20 ms) after its lease ends.

**Lost replies.** A create whose reply was lost may have made a node anyway. Node names carry
the owner id, so the next attempt of the same owner finds it and keeps the older one (its place
in the queue); a caller that gave up leaves its owner id for a sweep that deletes such nodes
as soon as the connection is back.

**Sessions.** One kazoo client per backend (one ``LockKit``), started on first use, stopped
by ``kit.close()``. When the connection drops, holders' deadlines are capped at a third of the
session timeout (the earliest the server may expire the session) and they are told (``on_lost``,
``check()`` raises ``LockLost``) if it is not back by then; when the session expires they are
told at once. Requests made while the connection is down fail at once with
``BackendUnavailable``; none waits longer than ``socket_timeout`` (default 5 s).

**Options** (query string or ``OPTIONS``): ``session_timeout``, ``socket_timeout``;
``auth=digest|sasl`` with ``zookeeper://user:password@...`` (or ``username``/``password``)
and ``sasl_mechanism``; ``acl=open|creator|read`` for the nodes we create (``creator`` by
default with credentials); ``use_ssl``, ``certfile``, ``keyfile``, ``ca``, ``verify_certs``.
"""

from .backend import ZooKeeperBackend

__all__ = ["ZooKeeperBackend"]
