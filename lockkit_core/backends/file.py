"""``file://DIR``: locks among the processes of one host, one small record file per key.

Every operation is a short critical section on the key's file: ``flock(LOCK_EX)``, read the
record, decide, write it back, unlock. No flock is kept for the tenure: ownership lives in the
record (owner token, expiry on CLOCK_MONOTONIC, holder pid), so a holder that is stopped
(SIGSTOP, a debugger) is taken over once its TTL has passed, as on a server. A holder that
crashed (SIGKILL, OOM killer, os._exit) frees its keys at once, as its pid is gone; one that exits
normally marks its records detached on the way out, so an owner token handed to another
process (a Celery producer's lock) lives on until its TTL. The fencing counter stays in the
file after release, so tokens increase per key for as long as the directory lives.

Waiting is a queue in the record, as on Redis: a blocking caller that finds the key busy joins
it in the same critical section; a release (or a takeover of a lapsed lease) hands the lock
straight to the oldest live waiter, with a new fencing token, so waiters are served in arrival
order and a releaser cannot take the key straight back. An entry lives twice its waiter's
lease unless renewed by that waiter's next attempt, and one whose process is gone is skipped.
The queue holds at most :data:`_MAX_QUEUE` entries; later callers poll until there is room.

On Linux each waiter binds a datagram socket in the abstract namespace (a random name, no
file, gone with its process) and keeps its name and a random ticket in its entry; the hand-over
sends it ``<ticket> <fence>``, so it starts at once, without reading the record. Anyone on the
host may send to the socket, but only those who may read the record know the ticket. A waiter
also reads the record's first line now and then (often without such a socket), which is how it
notices a holder that died or a lease that lapsed, or a notice that could not reach it (another
network namespace). Blocking in ``flock`` would not do: no flock is held during a tenure, and
a blocking ``flock`` cannot be given a timeout from a library without signals.

Nothing is fsynced: a lock does not outlive a reboot, and a record written under another boot
id is free, queue and all. The directory is created with mode 0700, its files with 0600.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import os
import re
import select
import socket
import stat
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from hashlib import sha256
from typing import Any, ClassVar, Concatenate, ParamSpec, TypeVar

from ..config import default_url
from ..errors import BackendError, BackendUnavailable, NotSupported
from ..url import LockURL
from .base import Backend, Capability, Grade, Grant, Lease, SleepWaiter, Waiter

if sys.platform != "win32":
    import fcntl

__all__ = ["FileBackend", "default_directory", "file_name"]

P = ParamSpec("P")
T = TypeVar("T")

_MAGIC = b"lockkit-file/2"
_MAGIC_1 = b"lockkit-file/1"  # the same record without a queue; read, never written
_FREE = b"-"
_CHUNK = 4096
#: blocking waiters queued per key (~130 bytes each): bounds the record and each operation on it
_MAX_QUEUE = 1024
#: bytes a waiter reads to see the record's first line (the owner and lease)
_HEAD = 1024
#: a waiter's first and longest pause between looks, without and with a wake-up socket: the
#: socket makes looks a fallback, for a hand-over whose datagram did not arrive
_POLL = (0.0002, 0.005)
_POLL_NOTIFIED = (0.01, 0.05)
#: how long after its last wait in a queue a process's blocking callers queue on first attempt
_QUEUE_FIRST = 30.0
#: open key files kept per backend; beyond that the oldest are closed (reopened on demand)
_MAX_OPEN = 512
#: how long an operation waits for another process's critical section (microseconds long)
_FLOCK_PATIENCE = 5.0
_READABLE = re.compile(r"[a-z0-9_:-][a-z0-9._:-]{0,99}")


def file_name(key: str) -> str:
    """The name of the file holding ``key``'s record.

    Short keys of lower-case letters, digits and ``._:-`` are used as they are (``k-<key>.lock``);
    any other key is hashed (``h-<sha256>.lock``). The prefixes keep the two forms apart, and
    upper case is hashed because some file systems (macOS) fold case.
    """
    if _READABLE.fullmatch(key):
        return f"k-{key}.lock"
    return f"h-{sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:40]}.lock"


def default_directory() -> str:
    """The directory ``file://`` alone names: ``lockkit-<uid>`` under the system temp dir."""
    return default_url()[len("file://") :]


@functools.cache
def _boot_id() -> bytes:
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read().strip() or _FREE
    except OSError:
        return _FREE


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _owner_bytes(owner: str) -> bytes:
    if owner.isascii() and owner.isalnum():
        return owner.encode("ascii")
    # Anything else would break the space-separated record, so it is stored as hex.
    return b"%" + owner.encode("utf-8", "surrogatepass").hex().encode("ascii")


def _owner_str(raw: bytes) -> str:
    if raw.startswith(b"%"):
        return bytes.fromhex(raw[1:].decode("ascii")).decode("utf-8", "surrogatepass")
    return raw.decode("ascii")


class _Entry:
    """A blocking waiter in a record's queue, one line: ``owner expires ttl pid pidns host wake``.

    ``expires`` is when the entry lapses unless its waiter attempts again; ``ttl`` the lease
    it gets when handed the lock; ``wake`` the name of its wake-up socket and its ticket (16
    hex digits each), or ``-``. ``handed`` is the fence it was just handed the lock with.
    Queues are kept as bytes; only the entry at the head is ever parsed.
    """

    __slots__ = ("expires", "handed", "host", "owner", "pid", "pidns", "ttl", "wake")

    def __init__(self, line: bytes) -> None:
        f = line.split(b" ")
        if len(f) != 7:
            raise ValueError("bad queue entry")
        self.owner = f[0]
        self.expires = float(f[1])
        self.ttl = float(f[2])
        self.pid = int(f[3])
        self.pidns = int(f[4])
        self.host = f[5]
        self.wake = f[6]
        self.handed = 0


def _find(queue: bytes, owner: bytes) -> tuple[int, int]:
    """Where ``owner``'s line is in ``queue``, end included; ``(-1, -1)`` if it is not."""
    mark = owner + b" "
    if queue.startswith(mark):
        start = 0
    else:
        start = queue.find(b"\n" + mark) + 1
        if start == 0:
            return -1, -1
    return start, queue.index(b"\n", start) + 1


def _without(queue: bytes, owner: bytes) -> bytes:
    start, end = _find(queue, owner)
    return queue if start < 0 else queue[:start] + queue[end:]


class _Record:
    """One key's file: ``MAGIC fence owner expires ttl pid pidns boot host keylen queuelen``,
    ``\\n``, the key, ``\\n``, then ``queuelen`` bytes of queue entries (:class:`_Entry`),
    oldest first.

    The lengths make the record self-delimiting: a shorter record is padded with spaces to the
    file's size rather than truncating the file. ``whole=False`` parses the first line only.
    """

    __slots__ = ("boot", "expires", "fence", "host", "key", "owner", "pid", "pidns", "queue", "ttl")

    def __init__(self, data: bytes, whole: bool = True) -> None:
        head, _, rest = data.partition(b"\n")
        fields = head.split(b" ")
        if len(fields) == 11 and fields[0] == _MAGIC:
            waiting = int(fields[10])
        elif len(fields) == 10 and fields[0] == _MAGIC_1:
            waiting = 0
        else:
            raise ValueError("not a lockkit record")
        self.fence = int(fields[1])
        self.owner: bytes | None = None if fields[2] == _FREE else fields[2]
        self.expires = float(fields[3])
        self.ttl = float(fields[4])
        self.pid = int(fields[5])
        self.pidns = int(fields[6])
        self.boot = fields[7]
        self.host = fields[8]
        self.queue = b""
        if not whole:
            return
        size = int(fields[9])
        self.key = rest[:size]
        if len(self.key) != size:
            raise ValueError("truncated key")
        if waiting:
            self.queue = rest[size + 1 : size + 1 + waiting]
            if (
                rest[size : size + 1] != b"\n"
                or len(self.queue) != waiting
                or not self.queue.endswith(b"\n")
            ):
                raise ValueError("truncated queue")

    def tail(self) -> bytes:
        return b"%d %d %s %s" % (self.pid, self.pidns, self.boot, self.host)


class _Slot:
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


class FileBackend(Backend):
    """Lock files in one directory; exclusion among the processes of this host.

    ``file:///var/lock/app`` uses ``/var/lock/app``; ``file://`` alone uses
    :func:`default_directory`; a relative path is taken from the current directory. Everything
    after ``file://`` up to ``?`` is the path, verbatim.
    """

    schemes: ClassVar[tuple[str, ...]] = ("file",)
    capabilities: ClassVar[Capability] = (
        Capability.TTL
        | Capability.FENCING
        | Capability.FAIR
        | Capability.CROSS_PROCESS
        | Capability.LIST
    )
    grade: ClassVar[Grade] = Grade.SINGLE_NODE

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        if sys.platform == "win32":
            raise NotSupported("the file:// backend needs fcntl.flock, which Windows lacks")
        where = url.raw[url.raw.index("://") + 3 :].partition("?")[0]
        self.directory = os.path.abspath(where) if where else default_directory()
        self._prepare_directory()
        self._slots: dict[str, _Slot] = {}
        self._slots_lock = threading.Lock()
        #: key -> owner of every record this process last wrote as held
        self._written: dict[str, bytes] = {}
        #: (key, owner) -> the waiter of a blocking caller: its attempts join the queue
        self._queued: dict[tuple[str, str], _FileWaiter] = {}
        self._sender: socket.socket | None = None
        self._bells: list[_Bell] = []
        self._waited_at = -_QUEUE_FIRST  # when a caller of this process last queued
        self._identify()
        _backends.add(self)

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

    def _identify(self) -> None:
        self._pid = os.getpid()
        self._pidns = _pid_namespace()
        self._boot = _boot_id()
        host = socket.gethostname().encode("utf-8", "replace")
        self._host = b"_".join(host.split()) or _FREE
        self._me = self._tail(self._pid)

    def _tail(self, pid: int) -> bytes:
        return b"%d %d %s %s" % (pid, self._pidns, self._boot, self._host)

    def describe(self) -> str:
        """``file://`` and the absolute directory."""
        return "file://" + self.directory

    # -- the critical section ------------------------------------------------------------------

    def _open(self, key: str, create: bool) -> _Slot | None:
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
        evicted: list[_Slot] = []
        with self._slots_lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = _Slot(key, path, fd)
                fd = -1
                while len(self._slots) > _MAX_OPEN:
                    evicted.append(self._slots.pop(next(iter(self._slots))))
        if fd >= 0:
            os.close(fd)  # another thread opened it first
        for old in evicted:
            with old.mutex:
                self._close(old)
        return slot

    @staticmethod
    def _close(slot: _Slot) -> None:
        fd, slot.fd = slot.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _enter(self, key: str, create: bool) -> _Slot | None:
        """Lock ``key``'s file against this process's other threads and other processes."""
        if os.getpid() != self._pid:
            self.after_fork_in_child()
        while True:
            with self._slots_lock:
                slot = self._slots.get(key)
            if slot is None:
                slot = self._open(key, create)
                if slot is None:
                    return None
            slot.mutex.acquire()
            try:
                # fd < 0: evicted while we waited for the mutex; look again.
                if slot.fd >= 0 and self._flock_file(slot):
                    return slot
            except BaseException:
                slot.mutex.release()
                raise
            slot.mutex.release()

    def _flock_file(self, slot: _Slot) -> bool:
        """Take the flock of ``slot`` (its mutex held); False, unlocked and dropped from the
        cache, if the file was deleted meanwhile (by a temp cleaner): others use a new one."""
        _flock(slot.fd, fcntl.LOCK_EX, slot.path)
        try:
            if os.fstat(slot.fd).st_nlink > 0:
                return True
        except BaseException:
            fcntl.flock(slot.fd, fcntl.LOCK_UN)
            raise
        fcntl.flock(slot.fd, fcntl.LOCK_UN)
        with self._slots_lock:
            if self._slots.get(slot.key) is slot:
                del self._slots[slot.key]
        self._close(slot)
        return False

    @staticmethod
    def _leave(slot: _Slot) -> None:
        try:
            fcntl.flock(slot.fd, fcntl.LOCK_UN)
        finally:
            slot.mutex.release()

    def _locked(
        self,
        key: str,
        create: bool,
        action: Callable[Concatenate[_Slot, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T | None:
        """Run ``action`` inside ``key``'s critical section; None if ``key`` has no file and
        ``create`` is false. The one place where OS errors become BackendUnavailable."""
        try:
            slot = self._enter(key, create)
            if slot is None:
                return None
            try:
                return action(slot, *args, **kwargs)
            finally:
                self._leave(slot)
        except OSError as exc:
            raise self._unavailable(exc, os.path.join(self.directory, file_name(key))) from exc

    def _unavailable(self, exc: OSError, path: str) -> BackendUnavailable:
        where = exc.filename if isinstance(exc.filename, str) else path
        return BackendUnavailable(f"file:// lock store failed on {where!r}: {exc.strerror or exc}")

    def _read(self, slot: _Slot) -> _Record | None:
        data = os.pread(slot.fd, _CHUNK, 0)
        if len(data) == _CHUNK:
            data += _read_rest(slot.fd, len(data))
        slot.size = len(data)
        if not data:
            return None
        rec = _parse(data, slot.path)
        if rec.queue and rec.boot != self._boot:
            rec.queue = b""  # waiters of another boot are gone with it
        return rec

    def _write(
        self,
        slot: _Slot,
        fence: int,
        owner: bytes,
        expires: float,
        ttl: float,
        queue: bytes,
        tail: bytes,
    ) -> None:
        """Write the record; ``tail`` (pid pidns boot host) names its holder. The lease is
        tracked for :meth:`_at_exit` only when the holder is this process (``self._me``)."""
        data = b"%s %d %s %r %r %s %d %d\n%s\n%s" % (
            _MAGIC,
            fence,
            owner,
            expires,
            ttl,
            tail,
            len(slot.encoded),
            len(queue),
            slot.encoded,
            queue,
        )
        shrink = False
        if len(data) < slot.size:
            # Pad instead of truncating: changing a file's size costs several times the write.
            # Only a file left large by a long queue is cut, so that reads stay one pread.
            shrink = slot.size > _CHUNK and (len(data) <= _CHUNK or len(data) <= slot.size // 2)
            if not shrink:
                data += b" " * (slot.size - len(data))
        if os.pwrite(slot.fd, data, 0) != len(data):
            raise OSError(errno.ENOSPC, "short write to the lock file (disk full?)", slot.path)
        if shrink:
            os.ftruncate(slot.fd, len(data))
        slot.size = len(data)
        if tail is self._me:
            if owner == _FREE:
                self._written.pop(slot.key, None)
            else:
                self._written[slot.key] = owner

    # -- deciding ------------------------------------------------------------------------------

    def _current(self, rec: _Record, now: float) -> bool:
        """The lease in ``rec`` has an owner and has not run out on this boot's clock."""
        return (
            rec.owner is not None
            and now < rec.expires
            and rec.boot == self._boot
            # More time left than the lease ever had: written under another clock.
            and rec.expires - now <= rec.ttl + 1.0
        )

    def _held(self, rec: _Record, now: float) -> bool:
        """``rec`` excludes other owners: current, and its holder process is not gone."""
        return self._current(rec, now) and not self._gone(rec.pid, rec.pidns, rec.host)

    def _gone(self, pid: int, pidns: int, host: bytes) -> bool:
        """The process ``pid`` of a record or queue entry is known to have exited."""
        if pidns != self._pidns or host != self._host or pid <= 0:
            # Another pid namespace or host: its pids mean nothing here. A negative pid is a
            # holder that exited normally: its lease runs until its TTL.
            return False
        if pid == self._pid:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False  # PermissionError: it exists, under another user
        return False

    def _lease(self, rec: _Record, key: str, now: float) -> Lease:
        assert rec.owner is not None
        return Lease(
            key,
            _owner_str(rec.owner)[:8],
            rec.fence,
            rec.expires - now,
            f"{rec.host.decode('utf-8', 'replace')} pid {abs(rec.pid)}"
            + (" (exited)" if rec.pid < 0 else ""),
        )

    def _join(self, rec: _Record, mine: bytes, ttl: float, now: float, waiter: _FileWaiter) -> None:
        """Put the caller's entry at the tail of ``rec.queue``, or renew it in place. A full
        queue is left as it is (but for lapsed entries): the caller polls until there is room."""
        self._waited_at = now
        line = b"%s %r %r %d %d %s %s\n" % (
            mine,
            now + 2 * ttl,
            ttl,
            self._pid,
            self._pidns,
            self._host,
            waiter.ring(),
        )
        queue = rec.queue
        start, end = _find(queue, mine)
        if start >= 0:
            rec.queue = queue[:start] + line + queue[end:]
        else:
            if queue.count(b"\n") >= _MAX_QUEUE:
                queue = rec.queue = _prune(queue, now)
            if queue.count(b"\n") >= _MAX_QUEUE:
                waiter.queued = False
                return
            rec.queue = queue + line
        waiter.queued = True

    def _pop_live(self, rec: _Record, now: float) -> _Entry | None:
        """Remove and return the oldest entry of ``rec.queue`` whose waiter may be there."""
        queue = rec.queue
        while queue:
            end = queue.index(b"\n") + 1
            line, queue = queue[: end - 1], queue[end:]
            try:
                head = _Entry(line)
            except ValueError:
                continue  # not ours to fix, not worth failing for: skip it
            if head.expires > now and not self._gone(head.pid, head.pidns, head.host):
                rec.queue = queue
                return head
        rec.queue = b""
        return None

    def _hand_to(self, slot: _Slot, rec: _Record, head: _Entry, now: float) -> None:
        """Make the waiter of ``head`` (popped from ``rec.queue``) the holder, new fence."""
        tail = b"%d %d %s %s" % (head.pid, head.pidns, self._boot, head.host)
        head.handed = rec.fence + 1
        self._write(slot, head.handed, head.owner, now + head.ttl, head.ttl, rec.queue, tail)
        self._written.pop(slot.key, None)

    def _hand_on(self, slot: _Slot, rec: _Record, now: float) -> _Entry | None:
        """Give the key of ``rec`` (which its holder gives up) to the oldest live waiter, or
        free it. Returns the entry handed to, whose waiter is to be woken."""
        head = self._pop_live(rec, now) if rec.queue else None
        if head is None:
            self._write(slot, rec.fence, _FREE, 0.0, 0.0, b"", self._me)
            return None
        self._hand_to(slot, rec, head, now)
        return head

    def _try_acquire(
        self, slot: _Slot, owner: str, ttl: float, waiter: _FileWaiter | None
    ) -> tuple[Grant, _Entry | None]:
        rec = self._read(slot)
        now = time.monotonic()
        mine = _owner_bytes(owner)
        if rec is None:
            self._write(slot, 1, mine, now + ttl, ttl, b"", self._me)
            if waiter is not None:
                waiter.granted = True
            return Grant(True, 1), None
        if rec.owner == mine and self._current(rec, now):
            # A retried request, or a lock handed to this waiter: renew, keep the token.
            queue = _without(rec.queue, mine) if rec.queue else b""
            self._write(slot, rec.fence, mine, now + ttl, ttl, queue, self._me)
            return Grant(True, rec.fence), None
        if self._held(rec, now):
            if waiter is not None:
                self._join(rec, mine, ttl, now, waiter)
                self._write(
                    slot, rec.fence, rec.owner or _FREE, rec.expires, rec.ttl, rec.queue, rec.tail()
                )
            return Grant(False, retry_after=rec.expires - now), None
        # Free, lapsed, or its holder is gone. Waiters come first, in order; a blocking caller
        # keeps its place or joins at the tail, a non-blocking one only hands the key on.
        if waiter is not None and rec.queue:
            self._join(rec, mine, ttl, now, waiter)
        head = self._pop_live(rec, now) if rec.queue else None
        fence = rec.fence + 1
        if head is None or head.owner == mine:
            self._write(slot, fence, mine, now + ttl, ttl, rec.queue, self._me)
            if waiter is not None:
                waiter.granted = True
            return Grant(True, fence), None
        self._hand_to(slot, rec, head, now)
        return Grant(False, retry_after=head.ttl), head

    def _release(self, slot: _Slot, owner: str) -> tuple[bool, _Entry | None]:
        rec = self._read(slot)
        if rec is None or rec.owner != _owner_bytes(owner):
            return False, None
        now = time.monotonic()
        if not rec.queue:
            self._write(slot, rec.fence, _FREE, 0.0, 0.0, b"", self._me)
            return self._current(rec, now), None
        return self._current(rec, now), self._hand_on(slot, rec, now)

    def _leave_queue(self, slot: _Slot, owner: str) -> _Entry | None:
        """Drop ``owner``'s entry; pass the key on if it was handed to ``owner`` meanwhile."""
        rec = self._read(slot)
        if rec is None:
            return None
        mine = _owner_bytes(owner)
        queue = _without(rec.queue, mine)
        if rec.owner == mine:
            rec.queue = queue
            return self._hand_on(slot, rec, time.monotonic())
        if len(queue) != len(rec.queue):
            self._write(
                slot, rec.fence, rec.owner or _FREE, rec.expires, rec.ttl, queue, rec.tail()
            )
        return None

    def _extend(self, slot: _Slot, owner: str, ttl: float) -> bool:
        rec = self._read(slot)
        now = time.monotonic()
        if rec is None or rec.owner != _owner_bytes(owner) or not self._current(rec, now):
            return False
        self._write(slot, rec.fence, rec.owner, now + ttl, ttl, rec.queue, self._me)
        return True

    def _detach(self, slot: _Slot, owner: bytes) -> None:
        rec = self._read(slot)
        if rec is not None and rec.owner == owner and rec.pid == self._pid:
            self._write(slot, rec.fence, owner, rec.expires, rec.ttl, rec.queue, self._me)

    @staticmethod
    def _glance(slot: _Slot) -> _Record | None:
        data = os.pread(slot.fd, _HEAD, 0)
        if b"\n" not in data:
            data = _read_rest(slot.fd, 0)
        return _parse(data, slot.path, whole=False) if data else None

    def _info(self, slot: _Slot, key: str) -> Lease | None:
        rec = self._read(slot)
        now = time.monotonic()
        return self._lease(rec, key, now) if rec is not None and self._held(rec, now) else None

    def _force_release(self, slot: _Slot) -> tuple[bool, _Entry | None]:
        rec = self._read(slot)
        if rec is None or rec.owner is None:
            return False, None
        now = time.monotonic()
        return self._held(rec, now), self._hand_on(slot, rec, now)

    # -- waking waiters ------------------------------------------------------------------------

    def _wake(self, entry: _Entry | None) -> None:
        """Tell the waiter of ``entry`` that the key was handed to it: ``<ticket> <fence>``."""
        if entry is None or len(entry.wake) != 32 or not _ABSTRACT:
            return
        try:
            sender = self._sender
            if sender is None:
                sender = self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sender.setblocking(False)
            sender.sendto(b"%s %d" % (entry.wake[16:], entry.handed), _address(entry.wake[:16]))
        except OSError:
            pass  # gone, another network namespace, or its buffer full: it looks again soon

    def _take_bell(self) -> _Bell | None:
        if not _ABSTRACT:
            return None
        try:
            return self._bells.pop()
        except IndexError:
            pass
        try:
            return _Bell()
        except OSError:
            return None  # no sockets here, or the name was taken: waiters look on their own

    def _return_bell(self, bell: _Bell) -> None:
        if len(self._bells) < _SPARE_SOCKETS and os.getpid() == self._pid:
            bell.drain()  # a late datagram meant for its last waiter
            self._bells.append(bell)
        else:
            bell.sock.close()

    # -- the Backend interface ---------------------------------------------------------------

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        """Take ``key`` if it is free, its lease ran out, or its holder process is gone, and
        no live waiter queued before the caller."""
        waiter = self._queued.get((key, owner)) if self._queued else None
        if waiter is None:
            done = self._locked(key, True, self._try_acquire, owner, ttl, None)
            assert done is not None
            grant, handed = done
        else:
            waiter.ttl = ttl
            sent = time.monotonic()
            done = self._locked(key, True, self._try_acquire, owner, ttl, waiter)
            assert done is not None
            grant, handed = done
            if waiter.queued and waiter.queued_at is None:
                waiter.queued_at = sent
        if handed is not None:
            self._wake(handed)
        return grant

    def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds it and its lease has not run out, handing it to the
        oldest live waiter if any.

        A holder process that is gone does not matter here: while its token is still in the
        record nobody else took the key, so another process may release it with that token.
        """
        done = self._locked(key, False, self._release, owner)
        if done is None:
            return False
        if done[1] is not None:
            self._wake(done[1])
        return done[0]

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        """Reset the lease to ``ttl`` if ``owner`` holds it; a lease that ran out stays lost."""
        return bool(self._locked(key, False, self._extend, owner, ttl))

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        """Queue the caller's next attempts on ``key``; waiting is FIFO whatever ``fair``."""
        return _FileWaiter(self, key, owner)

    def queue_first(self) -> bool:
        """True while this process has queued lately: its blocking callers then register
        before their first attempt, which spares a contended caller one critical section and
        costs an uncontended one a few microseconds."""
        return time.monotonic() - self._waited_at < _QUEUE_FIRST

    def _withdraw(self, key: str, owner: str) -> None:
        self._wake(self._locked(key, False, self._leave_queue, owner))

    def list(self, prefix: str) -> list[Lease]:
        """Held locks whose key starts with ``prefix``, sorted by key."""
        leases: list[Lease] = []
        try:
            with os.scandir(self.directory) as entries:
                names = [entry.name for entry in entries]
        except OSError as exc:
            raise self._unavailable(exc, self.directory) from exc
        for name in names:
            if not name.endswith(".lock"):
                continue
            if name.startswith("k-"):
                if not name[2:-5].startswith(prefix):
                    continue
            elif not name.startswith("h-"):
                continue
            path = os.path.join(self.directory, name)
            try:
                rec = _peek(path)
            except OSError as exc:
                raise self._unavailable(exc, path) from exc
            except _NotARecord:
                continue  # acquiring its key reports it
            if rec is None:
                continue
            now = time.monotonic()
            key = rec.key.decode("utf-8", "surrogatepass")
            if key.startswith(prefix) and self._held(rec, now):
                leases.append(self._lease(rec, key, now))
        leases.sort(key=lambda lease: lease.key)
        return leases

    def info(self, key: str) -> Lease | None:
        """The lease on ``key``, or None if it is free."""
        return self._locked(key, False, self._info, key)

    def force_release(self, key: str) -> bool:
        """Free ``key`` whoever holds it (handing it to the oldest live waiter, if any);
        False if it was free. The fence counter stays."""
        done = self._locked(key, False, self._force_release)
        if done is None:
            return False
        self._wake(done[1])
        return done[0]

    # -- lifecycle ---------------------------------------------------------------------------

    def _at_exit(self) -> None:
        # Marks this process's held records detached (negative pid) so that their leases run
        # until their TTL: a holder pid that is gone frees a key at once, which is right after
        # a crash but would drop a lock whose owner token was handed to another process.
        if os.getpid() != self._pid:
            return
        self._me = self._tail(-self._pid)  # a watchdog renewing after this writes it too
        for key, owner in list(self._written.items()):
            with contextlib.suppress(BackendError):
                self._locked(key, False, self._detach, owner)

    def after_fork_in_child(self) -> None:
        """Close the inherited descriptors: they share their flocks with the parent's."""
        slots = self._slots
        self._slots = {}
        self._slots_lock = threading.Lock()
        self._written = {}
        self._queued = {}
        self._close_sockets()  # the parent's: its bells would ring here too
        for slot in slots.values():
            # The parent's threads may have held these mutexes at the fork; nobody here does.
            self._close(slot)
        self._identify()

    def close(self) -> None:
        """Close the cached descriptors. Held locks stay held until their TTL."""
        with self._slots_lock:
            slots = list(self._slots.values())
            self._slots.clear()
        for slot in slots:
            with slot.mutex:
                self._close(slot)
        self._close_sockets()

    def _close_sockets(self) -> None:
        sockets = [bell.sock for bell in self._bells]
        self._bells = []
        if self._sender is not None:
            sockets.append(self._sender)
            self._sender = None
        for sock in sockets:
            sock.close()


#: waiters bind an abstract unix socket (a name, no file, gone with its process): Linux only
_ABSTRACT = sys.platform == "linux"
#: idle wake-up sockets a backend keeps for its next waiters
_SPARE_SOCKETS = 8


def _address(name: bytes) -> bytes:
    return b"\0lockkit-" + name


class _Bell:
    """A datagram socket bound to a random abstract name: anyone on the host may ring it."""

    __slots__ = ("name", "poll", "sock")

    def __init__(self) -> None:
        self.name = os.urandom(8).hex().encode("ascii")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind(_address(self.name))
            self.sock.setblocking(False)
            self.poll = select.poll()
            self.poll.register(self.sock, select.POLLIN)
        except BaseException:
            self.sock.close()
            raise

    def wait(self, seconds: float) -> list[bytes]:
        """The datagrams that arrived within ``seconds``."""
        return self.drain() if self.poll.poll(seconds * 1000.0) else []

    def drain(self) -> list[bytes]:
        got: list[bytes] = []
        # Bounded: a flood of datagrams must not keep a waiter from looking at the record.
        while len(got) < 64 and self.poll.poll(0):
            try:
                got.append(self.sock.recv(64))
            except OSError:
                break
        return got


class _FileWaiter(Waiter):
    """A blocking caller on one key: its attempts queue it, and it waits to be handed the
    key, told by a datagram where it has a bell, else by looking at the record.

    A datagram is believed only if it carries the ticket kept in the waiter's entry, which
    only those who may read the record know; its grant is dated from before the entry was
    made (``since``), so a hand-over that lapsed meanwhile is never mistaken for a lease.
    """

    __slots__ = (
        "_backend",
        "_bell",
        "_cap",
        "_delay",
        "_fallback",
        "_ticket",
        "granted",
        "key",
        "owner",
        "queued",
        "queued_at",
        "ttl",
        "wake",
    )

    def __init__(self, backend: FileBackend, key: str, owner: str) -> None:
        self._backend = backend
        self.key = key
        self.owner = owner
        self.ttl = 0.0  # the caller's lease, set before each attempt
        self.queued = False  # the last attempt left an entry in the queue
        self.queued_at: float | None = None  # send time of the first attempt that queued it
        self.granted = False  # an attempt took the key while this was registered
        self.wake = _FREE  # kept in the entry: the bell's name and our ticket
        # Taken when first queued: a caller that finds the key free never needs them.
        self._bell: _Bell | None = None
        self._ticket = b""
        self._delay = self._cap = 0.0
        self._fallback: SleepWaiter | None = None
        backend._queued[(key, owner)] = self

    def ring(self) -> bytes:
        """The ``wake`` field of our entry, getting a bell the first time (Linux only)."""
        if self._delay == 0.0:
            self._bell = self._backend._take_bell()
            if self._bell is not None:
                self._ticket = os.urandom(8).hex().encode("ascii") + b" "
                self.wake = self._bell.name + self._ticket[:-1]
            self._delay, self._cap = _POLL if self._bell is None else _POLL_NOTIFIED
        return self.wake

    def wait(self, timeout: float) -> Grant | None:
        if not self.queued:
            # The queue was full: poll, and join at an attempt that finds room.
            if self._fallback is None:
                self._fallback = SleepWaiter()
            return self._fallback.wait(timeout)
        # Back within our own lease: the next attempt renews the entry, which lives two.
        end = time.monotonic() + min(timeout, self.ttl)
        # The attempt that queued us has just read the record: pause before the first look.
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            pause = min(left, self._delay)
            self._delay = min(self._cap, self._delay * 2)
            if self._bell is None:
                time.sleep(pause)
            else:
                for note in self._bell.wait(pause):
                    if note.startswith(self._ticket) and note[len(self._ticket) :].isdigit():
                        return self._handed(int(note[len(self._ticket) :]))
            done, grant = self._look()
            if done:
                return grant

    def _handed(self, fence: int) -> Grant:
        # As if written by our own attempt: a normal exit marks the record detached.
        self._backend._written[self.key] = _owner_bytes(self.owner)
        return Grant(True, fence, since=self.queued_at)

    def _look(self) -> tuple[bool, Grant | None]:
        """Read the record's first line: ``(True, grant)`` if the key was handed to us,
        ``(True, None)`` if an attempt may take it, ``(False, None)`` to keep waiting."""
        backend = self._backend
        rec = backend._locked(self.key, False, backend._glance)
        if rec is None:
            return True, None  # no file (removed by a temp cleaner): the attempt makes one
        now = time.monotonic()
        if rec.owner == _owner_bytes(self.owner) and backend._current(rec, now):
            return True, self._handed(rec.fence)
        return not backend._held(rec, now), None

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        backend = self._backend
        if backend._queued.get((self.key, self.owner)) is self:
            del backend._queued[(self.key, self.owner)]
        if self._bell is not None:
            backend._return_bell(self._bell)
            self._bell = None
        if not acquired and (self.queued_at is not None or self.granted):
            backend._withdraw(self.key, self.owner)


_backends: weakref.WeakSet[FileBackend] = weakref.WeakSet()


@atexit.register
def _detach_all() -> None:
    for backend in list(_backends):
        backend._at_exit()


class _NotARecord(BackendUnavailable):
    """A file in the lock directory that does not hold a lockkit record."""


def _parse(data: bytes, path: str, whole: bool = True) -> _Record:
    try:
        return _Record(data, whole)
    except ValueError as exc:
        raise _NotARecord(
            f"{path!r} does not hold a lockkit record ({exc}); remove the file to reset it "
            "(that key's fencing tokens then restart at 1)"
        ) from exc


def _flock(fd: int, operation: int, path: str) -> None:
    """``flock`` that gives up after :data:`_FLOCK_PATIENCE` instead of hanging behind a
    process stopped inside its critical section."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    deadline = time.monotonic() + _FLOCK_PATIENCE
    delay = 0.00002
    while True:
        time.sleep(delay)
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise BackendUnavailable(
                    f"{path!r} stayed flocked for {_FLOCK_PATIENCE:g} s; a process is stopped "
                    "inside its few-microsecond critical section"
                ) from None
        delay = min(delay * 2, 0.001)


def _prune(queue: bytes, now: float) -> bytes:
    """``queue`` without its lapsed (or unreadable) entries."""
    kept = []
    for line in queue.splitlines(keepends=True):
        with contextlib.suppress(ValueError):
            if _Entry(line[:-1]).expires > now:
                kept.append(line)
    return b"".join(kept)


def _peek(path: str) -> _Record | None:
    """Read the record at ``path`` under a shared flock; None if there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        _flock(fd, fcntl.LOCK_SH, path)
        try:
            data = _read_rest(fd, 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    return _parse(data, path) if data else None


def _read_rest(fd: int, offset: int) -> bytes:
    chunks = []
    while more := os.pread(fd, 1 << 16, offset):
        chunks.append(more)
        offset += len(more)
    return b"".join(chunks)
