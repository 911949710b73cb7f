"""The record store of ``file://``: the directory, the open key files and their critical sections.

Every operation is a short critical section on the key's file: ``flock(LOCK_EX)``, read the
record, decide, write it back, unlock. Descriptors are cached per key (at most
:data:`MAX_OPEN`); a thread mutex per file serialises this process's threads, because a flock
belongs to the open file description and would admit them all. This module also judges, from
the record alone, whether a lease is current and whether its holder process is still there.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from ...config import default_url
from ...errors import BackendUnavailable, ConfigError
from .record import CHUNK, FREE, HEAD, NotARecord, Record, encode, file_name, parse, read_rest

if sys.platform != "win32":
    import fcntl

P = ParamSpec("P")
T = TypeVar("T")

#: open key files kept per backend; beyond that the oldest are closed (reopened on demand)
MAX_OPEN = 512
#: how long an operation waits for another process's critical section (microseconds long)
FLOCK_PATIENCE = 5.0
#: the directory-wide fence counter: at least the fence of every record lockkit removed
FENCE_FILE = "fence.counter"


def default_directory() -> str:
    """The directory ``file://`` alone names: ``lockkit-<uid>`` under the system temp dir."""
    return default_url()[len("file://") :]


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


class Slot:
    """A cached descriptor of one key file; ``mutex`` serialises this process's threads on
    it, because a flock belongs to the open file description and would admit them all."""

    __slots__ = ("encoded", "fd", "key", "mutex", "path", "size")

    def __init__(self, key: str, path: str, fd: int) -> None:
        self.key = key
        self.encoded = key.encode("utf-8", "surrogatepass")
        self.path = path
        self.fd = fd
        self.size = 0
        self.mutex = threading.Lock()


class RecordStore:
    """The lock directory of one backend: opens, locks, reads and writes key records."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._prepare_directory()
        self.slots: dict[str, Slot] = {}
        self._slots_lock = threading.Lock()
        #: key -> owner of every record this process last wrote as held
        self.written: dict[str, bytes] = {}
        #: key -> when this process left its record free with nobody queued, oldest first
        self.idle: dict[str, float] = {}
        self._counter_fd = -1
        self._counter_lock = threading.Lock()
        self.identify()

    def _prepare_directory(self) -> None:
        path = self.directory
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            st = os.lstat(path)
        except OSError as exc:
            raise BackendUnavailable(
                f"cannot use {path!r} as the file:// lock directory: {exc.strerror or exc}"
            ) from exc
        if path == default_directory() and (
            not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid()
        ):
            # In a shared temp dir someone else could have planted it to read or forge records.
            raise BackendUnavailable(
                f"the default lock directory {path!r} is not a directory owned by this user "
                f"(uid {os.getuid()}); remove it or pass another file:// path"
            )
        if not os.access(path, os.W_OK | os.X_OK):
            raise BackendUnavailable(f"the file:// lock directory {path!r} is not writable")

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

    # -- the critical section ------------------------------------------------------------------

    def _open(self, key: str, create: bool) -> Slot | None:
        path = os.path.join(self.directory, file_name(key))
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:
            if not create:
                return None
            # The directory itself was removed (a temp cleaner): make it again.
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            fd = os.open(path, flags, 0o600)
        evicted: list[Slot] = []
        with self._slots_lock:
            slot = self.slots.get(key)
            if slot is None:
                slot = self.slots[key] = Slot(key, path, fd)
                fd = -1
                while len(self.slots) > MAX_OPEN:
                    evicted.append(self.slots.pop(next(iter(self.slots))))
        if fd >= 0:
            os.close(fd)  # another thread opened it first
        for old in evicted:
            with old.mutex:
                _close(old)
        return slot

    def _enter(self, key: str, create: bool, patience: float) -> Slot | None:
        """Lock ``key``'s file against this process's other threads and other processes."""
        while True:
            with self._slots_lock:
                slot = self.slots.get(key)
            if slot is None:
                slot = self._open(key, create)
                if slot is None:
                    return None
            slot.mutex.acquire()
            try:
                # fd < 0: evicted while we waited for the mutex; look again.
                if slot.fd >= 0 and self._flock_file(slot, patience):
                    return slot
            except BaseException:
                slot.mutex.release()
                raise
            slot.mutex.release()

    def _flock_file(self, slot: Slot, patience: float) -> bool:
        """Take the flock of ``slot`` (its mutex held); False, unlocked and dropped from the
        cache, if the file was deleted meanwhile (by a temp cleaner): others use a new one."""
        flock(slot.fd, fcntl.LOCK_EX, slot.path, patience)
        try:
            if os.fstat(slot.fd).st_nlink > 0:
                return True
        except BaseException:
            fcntl.flock(slot.fd, fcntl.LOCK_UN)
            raise
        fcntl.flock(slot.fd, fcntl.LOCK_UN)
        with self._slots_lock:
            if self.slots.get(slot.key) is slot:
                del self.slots[slot.key]
        _close(slot)
        return False

    @staticmethod
    def _leave(slot: Slot) -> None:
        try:
            if slot.fd >= 0:  # else closed by remove()
                fcntl.flock(slot.fd, fcntl.LOCK_UN)
        finally:
            slot.mutex.release()

    def locked(
        self,
        key: str,
        create: bool,
        action: Callable[Concatenate[Slot, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T | None:
        """Run ``action`` inside ``key``'s critical section; None if ``key`` has no file and
        ``create`` is false. The one place where OS errors become BackendUnavailable."""
        return self._locked(key, create, FLOCK_PATIENCE, action, *args, **kwargs)

    def locked_now(
        self, key: str, action: Callable[Concatenate[Slot, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T | None:
        """Like :meth:`locked` on an existing file, but :class:`BackendUnavailable` at once if
        another process is inside the critical section (for callers that must not wait)."""
        return self._locked(key, False, 0.0, action, *args, **kwargs)

    def _locked(
        self,
        key: str,
        create: bool,
        patience: float,
        action: Callable[Concatenate[Slot, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T | None:
        try:
            slot = self._enter(key, create, patience)
            if slot is None:
                return None
            try:
                return action(slot, *args, **kwargs)
            finally:
                self._leave(slot)
        except OSError as exc:
            raise self.unavailable(exc, os.path.join(self.directory, file_name(key))) from exc

    @staticmethod
    def unavailable(exc: OSError, path: str) -> BackendUnavailable:
        """``exc`` met on ``path`` as the error callers see."""
        where = exc.filename if isinstance(exc.filename, str) else path
        return BackendUnavailable(f"file:// lock store failed on {where!r}: {exc.strerror or exc}")

    # -- reading and writing records -----------------------------------------------------------

    def read(self, slot: Slot) -> Record | None:
        """The record in ``slot`` (its critical section held); None if the file is empty."""
        data = os.pread(slot.fd, CHUNK, 0)
        if len(data) == CHUNK:
            data += read_rest(slot.fd, len(data))
        slot.size = len(data)
        if not data:
            return None
        rec = parse(data, slot.path)
        self.check_host(rec, slot.path)
        if rec.queue and rec.boot != self.boot:
            rec.queue = b""  # waiters of another boot are gone with it
        return rec

    def write(
        self,
        slot: Slot,
        fence: int,
        owner: bytes,
        expires: float,
        ttl: float,
        queue: bytes,
        tail: bytes,
    ) -> None:
        """Write the record; ``tail`` (pid pidns boot host) names its holder. The lease is
        tracked for the exit hook only when the holder is this process (``self.me``)."""
        data = encode(fence, owner, expires, ttl, tail, slot.encoded, queue)
        shrink = False
        if len(data) < slot.size:
            # Pad instead of truncating: changing a file's size costs several times the write.
            # Only a file left large by a long queue is cut, so that reads stay one pread.
            shrink = slot.size > CHUNK and (len(data) <= CHUNK or len(data) <= slot.size // 2)
            if not shrink:
                data += b" " * (slot.size - len(data))
        if os.pwrite(slot.fd, data, 0) != len(data):
            raise OSError(errno.ENOSPC, "short write to the lock file (disk full?)", slot.path)
        if shrink:
            os.ftruncate(slot.fd, len(data))
        slot.size = len(data)
        if owner == FREE:
            if not queue:
                self.idle.pop(slot.key, None)
                self.idle[slot.key] = time.monotonic()
            if tail is self.me:
                self.written.pop(slot.key, None)
        else:
            if self.idle:
                self.idle.pop(slot.key, None)
            if tail is self.me:
                self.written[slot.key] = owner

    def remove(self, slot: Slot, fence: int) -> None:
        """Delete the free record in ``slot`` (its critical section held) after raising the
        fence counter to ``fence``, and close ``slot``. Processes holding a descriptor of the
        file notice, after their flock, that it has no name left and open a new one."""
        self.raise_floor(fence)
        # The name could only lead elsewhere if something other than lockkit removed the file.
        with contextlib.suppress(FileNotFoundError):
            if os.stat(slot.path).st_ino == os.fstat(slot.fd).st_ino:
                os.unlink(slot.path)
        with self._slots_lock:
            if self.slots.get(slot.key) is slot:
                del self.slots[slot.key]
        # Unlock explicitly: a forked child may still share the open file description.
        fcntl.flock(slot.fd, fcntl.LOCK_UN)
        _close(slot)

    def first_fence(self) -> int:
        """The fence of a key that has no record: above the fence counter and at least the
        wall clock in microseconds.

        The counter holds the fence of every record lockkit removed; the clock covers records
        removed by others (temp cleaners): a key's fence grows by one per grant, at most one
        per microsecond, from a start at or above the clock, so it stays at or below the clock
        unless the clock steps back.
        """
        return max(self.floor() + 1, time.time_ns() // 1000)

    def floor(self) -> int:
        """The fence counter; 0 if it was missing (removed by a temp cleaner)."""
        return self._counter(0)

    def raise_floor(self, fence: int) -> None:
        """Make the fence counter at least ``fence``."""
        self._counter(fence)

    def _counter(self, fence: int) -> int:
        """Read the fence counter, raising it to ``fence`` first if that is more."""
        path = os.path.join(self.directory, FENCE_FILE)
        with self._counter_lock:
            while True:
                if self._counter_fd < 0:
                    self._counter_fd = os.open(
                        path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
                    )
                fd = self._counter_fd
                flock(fd, fcntl.LOCK_EX if fence else fcntl.LOCK_SH, path)
                try:
                    if os.fstat(fd).st_nlink == 0:
                        # Removed by a temp cleaner: start a new one (the clock covers the gap).
                        self._counter_fd = -1
                        os.close(fd)
                        fd = -1
                        continue
                    value = _counter(os.pread(fd, 64, 0), path)
                    if fence > value:
                        data = b"%20d\n" % fence
                        if os.pwrite(fd, data, 0) != len(data):
                            raise OSError(errno.ENOSPC, "short write (disk full?)", path)
                        value = fence
                    return value
                finally:
                    if fd >= 0:
                        fcntl.flock(fd, fcntl.LOCK_UN)

    def _close_counter(self) -> None:
        fd, self._counter_fd = self._counter_fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def glance(self, slot: Slot) -> Record | None:
        """The first line of the record in ``slot``, parsed; None if the file is empty."""
        data = os.pread(slot.fd, HEAD, 0)
        if b"\n" not in data:
            data = read_rest(slot.fd, 0)
        if not data:
            return None
        rec = parse(data, slot.path, whole=False)
        self.check_host(rec, slot.path)
        return rec

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

    def names(self) -> list[str]:
        """The names of the files in the directory."""
        try:
            with os.scandir(self.directory) as entries:
                return [entry.name for entry in entries]
        except OSError as exc:
            raise self.unavailable(exc, self.directory) from exc

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

    # -- lifecycle ---------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        """Close the inherited descriptors: they share their flocks with the parent's."""
        slots = self.slots
        self.slots = {}
        self._slots_lock = threading.Lock()
        self.written = {}
        self.idle = {}
        self._counter_lock = threading.Lock()
        self._close_counter()  # the parent's: no flock of it is held outside a call
        for slot in slots.values():
            # The parent's threads may have held these mutexes at the fork; nobody here does.
            _close(slot)
        self.identify()

    def close(self) -> None:
        """Close the cached descriptors (they are reopened on demand)."""
        with self._slots_lock:
            slots = list(self.slots.values())
            self.slots.clear()
        for slot in slots:
            with slot.mutex:
                _close(slot)
        with self._counter_lock:
            self._close_counter()


def _close(slot: Slot) -> None:
    fd, slot.fd = slot.fd, -1
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def _counter(data: bytes, path: str) -> int:
    try:
        return int(data) if data.strip() else 0
    except ValueError:
        raise NotARecord(
            f"{path!r} does not hold a fence counter; remove it (tokens then restart from "
            "the wall clock in microseconds)"
        ) from None


def flock(fd: int, operation: int, path: str, patience: float = FLOCK_PATIENCE) -> None:
    """``flock`` that gives up after ``patience`` seconds instead of hanging behind a
    process stopped inside its critical section."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        if patience <= 0:
            raise BackendUnavailable(f"{path!r} is flocked by another process") from None
    deadline = time.monotonic() + patience
    delay = 0.00002
    while True:
        time.sleep(delay)
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise BackendUnavailable(
                    f"{path!r} stayed flocked for {patience:g} s; a process is stopped "
                    "inside its few-microsecond critical section"
                ) from None
        delay = min(delay * 2, 0.001)


def peek(path: str) -> Record | None:
    """Read the record at ``path`` under a shared flock; None if there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        flock(fd, fcntl.LOCK_SH, path)
        try:
            data = read_rest(fd, 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    return parse(data, path) if data else None
