"""Wake-ups for ``file://`` waiters: datagram sockets ("bells") in Linux's abstract namespace.

Each queued waiter binds a datagram socket to a random abstract name (a name, no file, gone
with its process) and keeps the name and a random ticket in its queue entry; the hand-over
sends it ``<ticket> <fence>``, so it starts at once, without reading the record. Anyone on the
host may send to the socket, but only those who may read the record know the ticket.
"""

from __future__ import annotations

import os
import select
import socket
import sys

from .record import Entry

#: waiters bind an abstract unix socket (a name, no file, gone with its process): Linux only
ABSTRACT = sys.platform == "linux"
#: idle wake-up sockets a backend keeps for its next waiters
SPARE_SOCKETS = 8


def address(name: bytes) -> bytes:
    """The abstract socket address of the bell called ``name``."""
    return b"\0lockkit-" + name


class Bell:
    """A datagram socket bound to a random abstract name: anyone on the host may ring it."""

    __slots__ = ("name", "poll", "sock")

    def __init__(self) -> None:
        self.name = os.urandom(8).hex().encode("ascii")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind(address(self.name))
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
        """The datagrams already there (at most 64)."""
        got: list[bytes] = []
        # Bounded: a flood of datagrams must not keep a waiter from looking at the record.
        while len(got) < 64 and self.poll.poll(0):
            try:
                got.append(self.sock.recv(64))
            except OSError:
                break
        return got


class Bells:
    """One backend's sending socket and its spare bells, reused by its next waiters."""

    __slots__ = ("_sender", "_spare")

    def __init__(self) -> None:
        self._sender: socket.socket | None = None
        self._spare: list[Bell] = []

    def ring(self, entry: Entry) -> bool:
        """Tell the waiter of ``entry`` that the key was handed to it: ``<ticket> <fence>``.
        True if its socket is closed (it left); False if sent, or if nothing is known."""
        if len(entry.wake) != 32 or not ABSTRACT:
            return False
        try:
            sender = self._sender
            if sender is None:
                sender = self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sender.setblocking(False)
            sender.sendto(b"%s %d" % (entry.wake[16:], entry.handed), address(entry.wake[:16]))
        except ConnectionRefusedError:
            return True  # no socket by that name (here): its waiter left, or is elsewhere
        except OSError:
            pass  # its buffer is full, or sockets fail here: it looks again soon
        return False

    def take(self) -> Bell | None:
        """A bell for a new waiter; None where there are none (it then looks on its own)."""
        if not ABSTRACT:
            return None
        try:
            return self._spare.pop()
        except IndexError:
            pass
        try:
            return Bell()
        except OSError:
            return None  # no sockets here, or the name was taken: waiters look on their own

    def give_back(self, bell: Bell, keep: bool) -> None:
        """Keep ``bell`` for the next waiter if ``keep`` and there is room, else close it."""
        if keep and len(self._spare) < SPARE_SOCKETS:
            bell.drain()  # a late datagram meant for its last waiter
            self._spare.append(bell)
        else:
            bell.sock.close()

    def close(self) -> None:
        """Close every socket; the object stays usable (it opens new ones on demand)."""
        sockets = [bell.sock for bell in self._spare]
        self._spare = []
        if self._sender is not None:
            sockets.append(self._sender)
            self._sender = None
        for sock in sockets:
            sock.close()
