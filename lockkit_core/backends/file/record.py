"""The record format of ``file://``: one file per key, its name, its first line and its queue.

A record is ``MAGIC fence owner expires ttl pid pidns boot host keylen queuelen started``,
``\\n``, the key, ``\\n``, then ``queuelen`` bytes of queue entries (:class:`Entry`), oldest
first. ``started`` is when the holder got the key (wall clock, for the admin views; 0 when
free). The
lengths make it self-delimiting: a shorter record is padded with spaces to the file's size
rather than truncating the file. ``owner`` (here and in queue entries) is :func:`owner_id`:
a digest of the owner token, never the token. Everything here is pure: bytes in,
values out.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from hashlib import sha256
from typing import TypeGuard

from ...errors import BackendUnavailable
from ..base import owner_hint
from ..base import owner_id as base_owner_id

MAGIC = b"lockkit-file/3"
MAGIC_2 = b"lockkit-file/2"  # the same record without ``started``; read, never written
MAGIC_1 = b"lockkit-file/1"  # nor a queue
FREE = b"-"
#: bytes read in one go; a longer record (a long queue) takes more reads
CHUNK = 4096
#: bytes a waiter reads to see the record's first line (the owner and lease)
HEAD = 1024
_READABLE = re.compile(r"[a-z0-9_:-][a-z0-9._:-]{0,99}")
_ID_LENGTH = 40  # hex digits of an owner id


def file_name(key: str) -> str:
    """The name of the file holding ``key``'s record.

    Short keys of lower-case letters, digits and ``._:-`` are used as they are (``k-<key>.lock``);
    any other key is hashed (``h-<sha256>.lock``). The prefixes keep the two forms apart, and
    upper case is hashed because some file systems (macOS) fold case.
    """
    if _READABLE.fullmatch(key):
        return f"k-{key}.lock"
    return f"h-{sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:40]}.lock"


@functools.lru_cache(maxsize=1024)
def owner_id(owner: str) -> bytes:
    """What a record keeps of the owner token ``owner``: :func:`~..base.owner_id` (40 hex
    digits), never the token itself, so that reading a record (or a queue entry) does not let
    anyone release or extend."""
    return base_owner_id(owner).encode("ascii")


def owns(stored: bytes | None, owner: str) -> TypeGuard[bytes]:
    """``stored`` (a record's owner field) names ``owner``: its :func:`owner_id`, or the
    token itself as records written before digests kept it (never 40 characters long, so an
    id read from a record cannot be presented as its token)."""
    if stored is None:
        return False
    if stored == owner_id(owner):
        return True
    return len(stored) != _ID_LENGTH and stored == owner_bytes(owner)


def hint_of(stored: bytes) -> str:
    """The owner hint of a record's owner field (see :func:`~..base.owner_hint`)."""
    if len(stored) == _ID_LENGTH:
        return stored[:8].decode("ascii")
    return owner_hint(owner_str(stored))  # a token kept by a record written before digests


def owner_bytes(owner: str) -> bytes:
    """``owner`` as space-free ASCII: itself when alphanumeric ASCII, else ``%`` and hex."""
    if owner.isascii() and owner.isalnum():
        return owner.encode("ascii")
    # Anything else would break the space-separated record, so it is stored as hex.
    return b"%" + owner.encode("utf-8", "surrogatepass").hex().encode("ascii")


def owner_str(raw: bytes) -> str:
    """The inverse of :func:`owner_bytes`."""
    if raw.startswith(b"%"):
        return bytes.fromhex(raw[1:].decode("ascii")).decode("utf-8", "surrogatepass")
    return raw.decode("ascii")


class Entry:
    """A blocking waiter in a record's queue, one line: ``owner expires ttl pid pidns host wake``.

    ``expires`` is when the entry lapses unless its waiter attempts again; ``ttl`` the lease
    it gets when handed the lock; ``wake`` the name of its wake-up socket and its ticket (16
    hex digits each), or ``-``. ``handed`` is the fence it was just handed the lock with, and
    ``handed_until`` the expiry then written.
    Queues are kept as bytes; only the entry at the head is ever parsed.
    """

    __slots__ = (
        "expires",
        "handed",
        "handed_until",
        "host",
        "owner",
        "pid",
        "pidns",
        "ttl",
        "wake",
    )

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
        self.handed_until = 0.0


def find(queue: bytes, owner: bytes) -> tuple[int, int]:
    """Where ``owner``'s line is in ``queue``, end included; ``(-1, -1)`` if it is not."""
    mark = owner + b" "
    if queue.startswith(mark):
        start = 0
    else:
        start = queue.find(b"\n" + mark) + 1
        if start == 0:
            return -1, -1
    return start, queue.index(b"\n", start) + 1


def without(queue: bytes, owner: bytes) -> bytes:
    """``queue`` without ``owner``'s line."""
    start, end = find(queue, owner)
    return queue if start < 0 else queue[:start] + queue[end:]


def prune(queue: bytes, now: float) -> bytes:
    """``queue`` without its lapsed (or unreadable) entries."""
    kept = []
    for line in queue.splitlines(keepends=True):
        with contextlib.suppress(ValueError):
            if Entry(line[:-1]).expires > now:
                kept.append(line)
    return b"".join(kept)


class Record:
    """One key's record (see the module docstring); ``whole=False`` parses the first line only."""

    __slots__ = (
        "boot",
        "expires",
        "fence",
        "host",
        "key",
        "owner",
        "pid",
        "pidns",
        "queue",
        "started",
        "ttl",
    )

    def __init__(self, data: bytes, whole: bool = True) -> None:
        head, _, rest = data.partition(b"\n")
        fields = head.split(b" ")
        self.started = 0.0  # unknown: written by a version that did not keep it
        if len(fields) == 12 and fields[0] == MAGIC:
            waiting = int(fields[10])
            self.started = float(fields[11])
        elif len(fields) == 11 and fields[0] == MAGIC_2:
            waiting = int(fields[10])
        elif len(fields) == 10 and fields[0] == MAGIC_1:
            waiting = 0
        else:
            raise ValueError("not a lockkit record")
        self.fence = int(fields[1])
        self.owner: bytes | None = None if fields[2] == FREE else fields[2]
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
        """``pid pidns boot host``: who wrote the record as its holder."""
        return b"%d %d %s %s" % (self.pid, self.pidns, self.boot, self.host)


def encode(
    fence: int,
    owner: bytes,
    expires: float,
    ttl: float,
    tail: bytes,
    key: bytes,
    queue: bytes,
    started: float = 0.0,
) -> bytes:
    """The bytes of a record; ``tail`` is ``pid pidns boot host``."""
    return b"%s %d %s %r %r %s %d %d %r\n%s\n%s" % (
        MAGIC,
        fence,
        owner,
        expires,
        ttl,
        tail,
        len(key),
        len(queue),
        started,
        key,
        queue,
    )


class NotARecord(BackendUnavailable):
    """A file in the lock directory that does not hold a lockkit record."""


def parse(data: bytes, path: str, whole: bool = True) -> Record:
    """``data`` read from ``path`` as a record; :class:`NotARecord` names the file if not."""
    try:
        return Record(data, whole)
    except ValueError as exc:
        raise NotARecord(
            f"{path!r} does not hold a lockkit record ({exc}); remove the file to reset it"
        ) from exc


def read_rest(fd: int, offset: int) -> bytes:
    """Everything in ``fd`` from ``offset`` on."""
    chunks = []
    while more := os.pread(fd, 1 << 16, offset):
        chunks.append(more)
        offset += len(more)
    return b"".join(chunks)
