"""Who wrote a ``file://`` record, and whether its lease and its process are still there.

A record names its holder by ``pid pidns boot host``. Another boot id alone is this host
before a reboot (the record is stale); another host name alone is another container of this
kernel; both differing is another machine sharing the directory, which is refused.
"""

from __future__ import annotations

import functools
import os
import socket

from ...errors import ConfigError
from .record import FREE, Record


@functools.cache
def boot_id() -> bytes:
    """This kernel's boot id: records written under another one are from before a reboot."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read().strip() or FREE
    except OSError:
        return FREE


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


class Liveness:
    """This process's identity, and the judgments made from it about records."""

    def identify(self) -> None:
        """Learn who this process is: pid, pid namespace, boot id and host name."""
        self.pid = os.getpid()
        self.pidns = _pid_namespace()
        self.boot = boot_id()
        host = socket.gethostname().encode("utf-8", "replace")
        self.host = b"_".join(host.split()) or FREE
        self.me = self.tail(self.pid)

    def tail(self, pid: int) -> bytes:
        """The ``pid pidns boot host`` of a record held by ``pid`` of this host."""
        return b"%d %d %s %s" % (pid, self.pidns, self.boot, self.host)

    # -- judging a record ----------------------------------------------------------------------

    def current(self, rec: Record, now: float) -> bool:
        """The lease in ``rec`` has an owner and has not run out on this boot's clock."""
        return (
            rec.owner is not None
            and now < rec.expires
            and rec.boot == self.boot
            # More time left than the lease ever had: written under another clock.
            and rec.expires - now <= rec.ttl + 1.0
        )

    def held(self, rec: Record, now: float) -> bool:
        """``rec`` excludes other owners: current, and its holder process is not gone."""
        return self.current(rec, now) and not self.gone(rec.pid, rec.pidns, rec.host)

    def gone(self, pid: int, pidns: int, host: bytes) -> bool:
        """The process ``pid`` of a record or queue entry is known to have exited."""
        if pidns != self.pidns or host != self.host or pid <= 0:
            # Another pid namespace or host: its pids mean nothing here. A negative pid is a
            # holder that exited normally: its lease runs until its TTL.
            return False
        if pid == self.pid:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False  # PermissionError: it exists, under another user
        return False

    def check_host(self, rec: Record, path: str) -> None:
        """Refuse a record written by another host: its leases cannot be judged from here.

        Another boot id alone is this host before a reboot (the record is stale), another
        host name alone is another container of this kernel; both differing is another
        machine sharing the directory (NFS), which file:// cannot exclude.
        """
        if rec.boot != self.boot and rec.host != self.host:
            raise ConfigError(
                f"file:// is single-host, but {path!r} was written by host "
                f"{rec.host.decode('utf-8', 'replace')!r} (boot id "
                f"{rec.boot.decode('ascii', 'replace')}), not by this one "
                f"({self.host.decode('utf-8', 'replace')!r}): the lock directory is shared "
                "between hosts (NFS?), where file:// would grant one lock on each. Use "
                "redis://, zookeeper:// or etcd:// for locks across hosts. If no other host "
                "uses this directory (this host was renamed before a reboot), remove the file."
            )
