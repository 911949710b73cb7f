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
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from ...config import default_url
from ...errors import BackendUnavailable
from .fence import FenceCounter
from .flock import FLOCK_PATIENCE, flock
from .liveness import Liveness
from .record import CHUNK, FREE, HEAD, MAGIC, Record, file_name, parse, read_rest
from .trust import check_directory, check_record_file

if sys.platform != "win32":
    import fcntl

P = ParamSpec("P")
T = TypeVar("T")

#: open key files kept per backend; beyond that the oldest are closed (reopened on demand)
MAX_OPEN = 512
#: a record left free this long (with nobody queued) is removed at this process's next
#: release; a key used again sooner keeps its file, which spares it a file creation
IDLE_SECONDS = 10.0
#: free records a process leaves before it removes the oldest, however recent
IDLE_MAX = 4096


def default_directory() -> str:
    """The directory ``file://`` alone names: ``lockkit-<uid>`` under the system temp dir."""
    return default_url()[len("file://") :]


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


class RecordStore(Liveness):
    """The lock directory of one backend: opens, locks, reads and writes key records, and
    judges them (:class:`Liveness`)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._prepare_directory()
        self.slots: dict[str, Slot] = {}
        self._slots_lock = threading.Lock()
        #: key -> owner of every record this process last wrote as held
        self.written: dict[str, bytes] = {}
        #: key -> when this process left its record free with nobody queued, oldest first
        self.idle: dict[str, float] = {}
        #: when the oldest of ``idle`` comes of age (monotonic): the next sweep is due
        self.sweep_at = 0.0
        self.fences = FenceCounter(directory)
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
        check_directory(path, st)
        if not os.access(path, os.W_OK | os.X_OK):
            raise BackendUnavailable(f"the file:// lock directory {path!r} is not writable")

    # -- the critical section ------------------------------------------------------------------

    def _open(self, key: str, create: bool) -> Slot | None:
        path = os.path.join(self.directory, file_name(key))
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:
            if not create:
                return None
            # The directory itself was removed (a temp cleaner): make it again, and judge it
            # again (someone else may have made it first).
            self._prepare_directory()
            fd = os.open(path, flags, 0o600)
        try:
            check_record_file(fd, path)
        except BaseException:
            os.close(fd)
            raise
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
            if patience >= FLOCK_PATIENCE:
                slot.mutex.acquire()
            elif not slot.mutex.acquire(timeout=max(patience, 0.05)):
                raise BackendUnavailable(f"{slot.path!r} is busy in another thread")
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
        return self._within(key, create, FLOCK_PATIENCE, action, *args, **kwargs)

    def locked_briefly(
        self,
        key: str,
        patience: float,
        action: Callable[Concatenate[Slot, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T | None:
        """Like :meth:`locked` on an existing file, but :class:`BackendUnavailable` after
        ``patience`` seconds (0: at once) if another thread or process is inside the critical
        section, for callers that must not wait behind one that is stuck."""
        return self._within(key, False, patience, action, *args, **kwargs)

    def _within(
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
        if rec.boot != self.boot:
            self.check_host(rec, slot.path)
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
        *,
        started: float,
    ) -> None:
        """Write the record; ``tail`` (pid pidns boot host) names its holder, ``started``
        when it got the key (``time.time()`` of a new grant, the record's own otherwise).
        The lease is tracked for the exit hook only when the holder is this process
        (``self.me``)."""
        data = b"%s %d %s %r %r %s %d %d %r\n%s\n%s" % (
            MAGIC,
            fence,
            owner,
            expires,
            ttl,
            tail,
            len(slot.encoded),
            len(queue),
            started,
            slot.encoded,
            queue,
        )  # as record.encode() does, without its call
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
                idle = self.idle
                idle.pop(slot.key, None)
                idle[slot.key] = time.monotonic()
                if len(idle) > IDLE_MAX:
                    self.sweep_at = 0.0
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
        self.fences.raise_to(fence)
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

    def names(self) -> list[str]:
        """The names of the files in the directory."""
        try:
            with os.scandir(self.directory) as entries:
                return [entry.name for entry in entries]
        except OSError as exc:
            raise self.unavailable(exc, self.directory) from exc

    # -- lifecycle ---------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        """Close the inherited descriptors: they share their flocks with the parent's."""
        slots = self.slots
        self.slots = {}
        self._slots_lock = threading.Lock()
        self.written = {}
        self.idle = {}
        self.fences.after_fork_in_child()
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
        self.fences.close()


def _close(slot: Slot) -> None:
    fd, slot.fd = slot.fd, -1
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def peek(path: str) -> Record | None:
    """Read the record at ``path`` under a shared flock; None if there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        check_record_file(fd, path)
        flock(fd, fcntl.LOCK_SH, path)
        try:
            data = read_rest(fd, 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    return parse(data, path) if data else None
