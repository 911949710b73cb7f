"""``file://DIR``: locks among the processes of one host, one small record file per key.

The parts, each in a module named for it:

- :mod:`.record`: the record format (one file per key: owner, lease, fence, queue), pure.
- :mod:`.store`: the directory, the open key files and their flock critical sections.
- :mod:`.flock`: ``flock`` that gives up behind a process stopped in its critical section.
- :mod:`.liveness`: who wrote a record, and whether its lease and process are still there.
- :mod:`.fence`: the directory-wide fence counter that outlives removed records.
- :mod:`.grant`: what acquire, release, extend and hand-over do to a record.
- :mod:`.queue`: the FIFO wait queue in the record and the waiter that sits in it.
- :mod:`.wakeups`: datagram sockets that tell a waiter it was handed the lock.
- :mod:`.backend`: :class:`FileBackend`, which glues them together.

Fencing tokens grow by one per grant of a key. A key's record is removed once it has been
free, with nobody queued, for ten seconds (at the next call of the process that freed it, or
when it closes or drops its backend or exits; sooner beyond 4096 such records per process),
so a free key costs no file. A record whose lease lapsed without a release stays until the
key is used again. Before removing a
record, lockkit raises the directory's fence counter (``fence.counter``) to its fence; a key
with no record starts above that counter and at or above the wall clock in microseconds. So a
key's tokens stay above all its earlier ones when lockkit removes its record, and when
something else (a temp cleaner) removes its record or the counter, unless the wall clock
stepped back, since the key's last grant, by more than the time the key then sat unused.

A holder that crashed (SIGKILL, OOM killer, os._exit) frees its keys at once, as its pid is
gone; one that exits normally marks its records detached on the way out, so an owner token
handed to another process (a Celery producer's lock) lives on until its TTL. ``file://`` is
single-host: a record written by another machine (a directory shared over NFS) is refused
with a ``ConfigError``, never taken as stale. Nothing is fsynced: a lock does not outlive a
reboot, and a record written under another boot id is free, queue and all. The directory is
created with mode 0700, its files with 0600.
"""

from .backend import FileBackend
from .record import file_name
from .store import default_directory

__all__ = ["FileBackend", "default_directory", "file_name"]
