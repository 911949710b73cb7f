"""Read-write locks and semaphores of ``file://``: one JSON file per lock under ``places/``.

``places/<name>`` (the record file name of ``rw:<key>`` or ``s:<key>``) holds, under an
exclusive ``flock``::

    {"holders": {<owner id>: [mode, expires, token, pid, pidns, boot]},
     "queue": [[<owner id>, mode, pid, pidns, bell], ...]}

``expires`` is on the system-wide monotonic clock (``null``: no lease); a place whose lease
ran out, written under another boot, or whose holder process is gone (same pid namespace) is
free. Who gets a place is :func:`lockkit_core.places.admitted` over the queue (first come,
first served); a waiter whose process is gone is dropped from it. Whoever frees a place rings
the bell (a datagram socket, :mod:`.wakeups`) of each waiter it lets in, and only those.
An empty file is removed, the key's fence saved in the directory's fence counter first.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import socket
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ...errors import BackendUnavailable
from ...places import admitted
from ..base import Grant, Lease, Waiter
from .flock import flock
from .liveness import Liveness
from .record import file_name, owner_id
from .wakeups import ABSTRACT, Bell, address

if TYPE_CHECKING:
    from .fence import FenceCounter

if os.name != "nt":
    import fcntl

__all__ = ["FilePlaces"]

Doc = dict[str, Any]


class FilePlaces:
    """The places under one lock directory, for one backend."""

    def __init__(self, directory: str, fences: FenceCounter, me: Liveness) -> None:
        self.directory = os.path.join(directory, "places")
        self._fences = fences
        self._me = me
        self.queued: dict[tuple[str, str], _PlaceWaiter] = {}

    def _path(self, key: str, mode: str) -> str:
        return os.path.join(self.directory, file_name(("s:" if mode == "slot" else "rw:") + key))

    @contextlib.contextmanager
    def _doc(self, key: str, mode: str) -> Iterator[Doc]:
        """The lock's document, locked; written back (or removed when empty) on the way out."""
        path = self._path(key, mode)
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            while True:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
                flock(fd, fcntl.LOCK_EX, path)
                # removed by its last user while we waited for it: open the new one
                if os.fstat(fd).st_nlink > 0:
                    break
                os.close(fd)
        except OSError as exc:
            raise BackendUnavailable(f"cannot use {path!r}: {exc.strerror or exc}") from exc
        try:
            raw = os.pread(fd, 1 << 20, 0)
            doc: Doc = json.loads(raw) if raw.strip() else {}
        except (OSError, ValueError) as exc:
            os.close(fd)
            raise BackendUnavailable(f"cannot read {path!r}: {exc}") from exc
        try:
            doc.setdefault("holders", {})
            doc.setdefault("queue", [])
            doc.setdefault("fence", 0)
            self._prune(doc)
            yield doc
            self._save(fd, path, doc)
        finally:
            os.close(fd)  # closing drops the flock

    def _save(self, fd: int, path: str, doc: Doc) -> None:
        try:
            if not doc["holders"] and not doc["queue"]:
                self._fences.raise_to(int(doc["fence"]))
                os.unlink(path)  # a free key costs nothing
            else:
                data = json.dumps(doc, separators=(",", ":")).encode()
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise BackendUnavailable(f"cannot write {path!r}: {exc}") from exc

    def _gone(self, pid: int, pidns: int) -> bool:
        if pidns != self._me.pidns or pid == self._me.pid:
            return False  # another pid namespace: only its lease can free it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    def _prune(self, doc: Doc) -> None:
        now = time.monotonic()
        boot = self._me.boot.decode()
        holders = doc["holders"]
        for oid, (_, expires, _, pid, pidns, booted) in list(holders.items()):
            if booted != boot or (expires is not None and expires <= now) or self._gone(pid, pidns):
                del holders[oid]
        doc["queue"] = [e for e in doc["queue"] if not self._gone(e[2], e[3])]

    def _ring_admitted(self, doc: Doc, limit: int) -> None:
        """Ring the bells of the waiters the queue lets in now: they come and take it."""
        holding = [h[0] for h in doc["holders"].values()]
        let_in = set(admitted(holding, [(e[0], e[1]) for e in doc["queue"]], limit))
        for entry in doc["queue"]:
            if entry[0] in let_in and entry[4] and ABSTRACT:
                with (
                    contextlib.suppress(OSError),
                    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender,
                ):
                    sender.sendto(b"1", address(entry[4].encode()))

    def try_acquire(self, key: str, owner: str, mode: str, limit: int, ttl: float) -> Grant:
        oid = owner_id(owner).decode()
        waiter = self.queued.get((key, owner))
        with self._doc(key, mode) as doc:
            doc["limit"] = limit
            now = time.monotonic()
            expires = None if math.isinf(ttl) else now + ttl
            place = doc["holders"].get(oid)
            if place is not None:
                place[1] = expires
                return Grant(True, place[2])
            queue = [(e[0], e[1]) for e in doc["queue"]]
            if waiter is not None and oid not in [q[0] for q in queue]:
                bell = waiter.bell.name.decode() if waiter.bell is not None else ""
                doc["queue"].append([oid, mode, self._me.pid, self._me.pidns, bell])
                queue.append((oid, mode))
            elif waiter is None:
                queue.append((oid, mode))  # looks as if at the tail
            holding = [h[0] for h in doc["holders"].values()]
            if oid in admitted(holding, queue, limit):
                doc["queue"] = [e for e in doc["queue"] if e[0] != oid]
                fence = max(int(doc["fence"]) + 1, self._fences.first())
                doc["fence"] = fence
                doc["holders"][oid] = [mode, expires, fence, self._me.pid, self._me.pidns,
                                       self._me.boot.decode()]  # fmt: skip
                self._ring_admitted(doc, limit)  # readers right behind may come in too
                return Grant(True, fence)
            left = [h[1] - now for h in doc["holders"].values() if h[1] is not None]
            return Grant(False, retry_after=min(left) if left else None)

    def release(self, key: str, owner: str, mode: str) -> bool:
        oid = owner_id(owner).decode()
        with self._doc(key, mode) as doc:
            place = doc["holders"].pop(oid, None)
            self._ring_admitted(doc, int(doc.get("limit", 0)))
            return place is not None

    def leave(self, key: str, owner: str, mode: str) -> None:
        oid = owner_id(owner).decode()
        with self._doc(key, mode) as doc:
            doc["queue"] = [e for e in doc["queue"] if e[0] != oid]
            self._ring_admitted(doc, int(doc.get("limit", 0)))

    def adopt(self, key: str, owner: str, mode: str, ttl: float) -> Grant:
        oid = owner_id(owner).decode()
        with self._doc(key, mode) as doc:
            place = doc["holders"].get(oid)
            if place is None:
                return Grant(False)
            place[1] = None if math.isinf(ttl) else time.monotonic() + ttl
            return Grant(True, place[2])

    def holders(self, key: str, mode: str) -> list[Lease]:
        if not os.path.exists(self._path(key, mode)):
            return []
        with self._doc(key, mode) as doc:
            now = time.monotonic()
            role = {"read": "reader", "write": "writer"}
            return sorted(
                (
                    Lease(
                        key,
                        oid[:8],
                        token,
                        None if expires is None else expires - now,
                        f"{role.get(kind, 'holder')}: pid {pid}",
                    )
                    for oid, (kind, expires, token, pid, _, _) in doc["holders"].items()
                ),
                key=lambda lease: lease.token or 0,
            )

    def waiter(self, key: str, owner: str, mode: str) -> Waiter:
        return _PlaceWaiter(self, key, owner, mode)


class _PlaceWaiter(Waiter):
    """Queued by its owner's attempts with a bell of its own, rung when it is let in."""

    def __init__(self, places: FilePlaces, key: str, owner: str, mode: str) -> None:
        self._places = places
        self._key = key
        self._owner = owner
        self._mode = mode
        self.bell: Bell | None = None
        if ABSTRACT:
            with contextlib.suppress(OSError):
                self.bell = Bell()
        places.queued[(key, owner)] = self

    def wait(self, timeout: float) -> Grant | None:
        if self.bell is None:
            time.sleep(min(timeout, 0.05))  # no sockets here: look again soon
        else:
            self.bell.wait(max(0.0, timeout))
        return None

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        self._places.queued.pop((self._key, self._owner), None)
        try:
            if not acquired:
                self._places.leave(self._key, self._owner, self._mode)
        finally:
            if self.bell is not None:
                self.bell.sock.close()
