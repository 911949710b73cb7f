"""``file://DIR``: locks among the processes of one host, one small record file per key.

Every operation is a short critical section on the key's file: ``flock(LOCK_EX)``, read the
record, decide, write it back, unlock. No flock is kept for the tenure: ownership lives in the
record (owner token, expiry on CLOCK_MONOTONIC, holder pid), so a holder that is stopped
(SIGSTOP, a debugger) is taken over once its TTL has passed, as on a server. A holder that
crashed (SIGKILL, OOM killer, os._exit) frees its keys at once, as its pid is gone; one that exits
normally marks its records detached on the way out, so an owner token handed to another
process (a Celery producer's lock) lives on until its TTL. The fencing counter stays in the
file after release, so tokens increase per key for as long as the directory lives.

Waiters poll with the base class's jittered backoff, each wait bounded by the holder's
remaining lease. Blocking in ``flock`` would not help: no flock is held during a tenure, and a
blocking ``flock`` cannot be given a timeout from a library without signals (SIGALRM belongs
to the application and reaches only the main thread).

Nothing is fsynced: a lock does not outlive a reboot, and a record written under another boot
id is free. The directory is created with mode 0700, its files with 0600.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import os
import re
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
from .base import Backend, Capability, Grade, Grant, Lease

if sys.platform != "win32":
    import fcntl

__all__ = ["FileBackend", "default_directory", "file_name"]

P = ParamSpec("P")
T = TypeVar("T")

_MAGIC = b"lockkit-file/1"
_FREE = b"-"
_CHUNK = 4096
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
    return default_url()[len("file://"):]


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


class _Record:
    """One key's file: ``MAGIC fence owner expires ttl pid pidns boot host keylen\\nkey\\n``.

    The key's byte length makes the record self-delimiting: a shorter record is padded with
    spaces to the file's size rather than truncating the file.
    """

    __slots__ = ("boot", "expires", "fence", "host", "key", "owner", "pid", "pidns", "ttl")

    def __init__(self, data: bytes) -> None:
        head, _, rest = data.partition(b"\n")
        fields = head.split(b" ")
        if len(fields) != 10 or fields[0] != _MAGIC:
            raise ValueError("not a lockkit record")
        self.fence = int(fields[1])
        self.owner: bytes | None = None if fields[2] == _FREE else fields[2]
        self.expires = float(fields[3])
        self.ttl = float(fields[4])
        self.pid = int(fields[5])
        self.pidns = int(fields[6])
        self.boot = fields[7]
        self.host = fields[8]
        size = int(fields[9])
        self.key = rest[:size]
        if len(self.key) != size:
            raise ValueError("truncated key")


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
        Capability.TTL | Capability.FENCING | Capability.CROSS_PROCESS | Capability.LIST
    )
    grade: ClassVar[Grade] = Grade.SINGLE_NODE

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        if sys.platform == "win32":
            raise NotSupported("the file:// backend needs fcntl.flock, which Windows lacks")
        where = url.raw[url.raw.index("://") + 3:].partition("?")[0]
        self.directory = os.path.abspath(where) if where else default_directory()
        self._prepare_directory()
        self._slots: dict[str, _Slot] = {}
        self._slots_lock = threading.Lock()
        #: key -> owner of every record this process last wrote as held
        self._written: dict[str, bytes] = {}
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

    @staticmethod
    def _read(slot: _Slot) -> _Record | None:
        data = os.pread(slot.fd, _CHUNK, 0)
        if len(data) == _CHUNK:
            data += _read_rest(slot.fd, len(data))
        slot.size = len(data)
        return _parse(data, slot.path) if data else None

    def _write(self, slot: _Slot, fence: int, owner: bytes, expires: float, ttl: float) -> None:
        data = b"%s %d %s %r %r %s %d\n%s\n" % (
            _MAGIC, fence, owner, expires, ttl, self._me, len(slot.encoded), slot.encoded
        )
        if len(data) < slot.size:
            # Pad instead of truncating: changing a file's size costs several times the write.
            data += b" " * (slot.size - len(data))
        if os.pwrite(slot.fd, data, 0) != len(data):
            raise OSError(errno.ENOSPC, "short write to the lock file (disk full?)", slot.path)
        slot.size = len(data)
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
        return self._current(rec, now) and not self._holder_gone(rec)

    def _holder_gone(self, rec: _Record) -> bool:
        if rec.pidns != self._pidns or rec.host != self._host or rec.pid <= 0:
            # Another pid namespace or host: its pids mean nothing here. A negative pid is a
            # holder that exited normally: its lease runs until its TTL.
            return False
        if rec.pid == self._pid:
            return False
        try:
            os.kill(rec.pid, 0)
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

    def _try_acquire(self, slot: _Slot, owner: str, ttl: float) -> Grant:
        rec = self._read(slot)
        now = time.monotonic()
        mine = _owner_bytes(owner)
        fence = 1
        if rec is not None:
            if rec.owner == mine and self._current(rec, now):
                self._write(slot, rec.fence, mine, now + ttl, ttl)
                return Grant(True, rec.fence)
            if self._held(rec, now):
                return Grant(False, retry_after=rec.expires - now)
            fence = rec.fence + 1
        self._write(slot, fence, mine, now + ttl, ttl)
        return Grant(True, fence)

    def _release(self, slot: _Slot, owner: str) -> bool:
        rec = self._read(slot)
        if rec is None or rec.owner != _owner_bytes(owner):
            return False
        current = self._current(rec, time.monotonic())
        self._write(slot, rec.fence, _FREE, 0.0, 0.0)
        return current

    def _extend(self, slot: _Slot, owner: str, ttl: float) -> bool:
        rec = self._read(slot)
        now = time.monotonic()
        if rec is None or rec.owner != _owner_bytes(owner) or not self._current(rec, now):
            return False
        self._write(slot, rec.fence, rec.owner, now + ttl, ttl)
        return True

    def _detach(self, slot: _Slot, owner: bytes) -> None:
        rec = self._read(slot)
        if rec is not None and rec.owner == owner and rec.pid == self._pid:
            self._write(slot, rec.fence, owner, rec.expires, rec.ttl)

    def _info(self, slot: _Slot, key: str) -> Lease | None:
        rec = self._read(slot)
        now = time.monotonic()
        return self._lease(rec, key, now) if rec is not None and self._held(rec, now) else None

    def _force_release(self, slot: _Slot) -> bool:
        rec = self._read(slot)
        if rec is None or rec.owner is None:
            return False
        held = self._held(rec, time.monotonic())
        self._write(slot, rec.fence, _FREE, 0.0, 0.0)
        return held

    # -- the Backend interface ---------------------------------------------------------------

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        """Take ``key`` if it is free, its lease ran out, or its holder process is gone."""
        grant = self._locked(key, True, self._try_acquire, owner, ttl)
        assert grant is not None
        return grant

    def release(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds it and its lease has not run out.

        A holder process that is gone does not matter here: while its token is still in the
        record nobody else took the key, so another process may release it with that token.
        """
        return bool(self._locked(key, False, self._release, owner))

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        """Reset the lease to ``ttl`` if ``owner`` holds it; a lease that ran out stays lost."""
        return bool(self._locked(key, False, self._extend, owner, ttl))

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
        """Free ``key`` whoever holds it; False if it was free. The fence counter stays."""
        return bool(self._locked(key, False, self._force_release))

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


_backends: weakref.WeakSet[FileBackend] = weakref.WeakSet()


@atexit.register
def _detach_all() -> None:
    for backend in list(_backends):
        backend._at_exit()


class _NotARecord(BackendUnavailable):
    """A file in the lock directory that does not hold a lockkit record."""


def _parse(data: bytes, path: str) -> _Record:
    try:
        return _Record(data)
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
