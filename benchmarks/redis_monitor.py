"""Count the commands clients send to a Redis server while some code runs.

``INFO commandstats`` and ``total_commands_processed`` also count the commands a Lua script
runs inside the server, so they overstate round trips. ``MONITOR`` tells the two apart (a
script's commands come from ``lua``), so this counts every command a client sent: one round
trip each, unless the client pipelines. MONITOR slows the server down; count over a short,
separate run, never during a timed one.
"""

from __future__ import annotations

import re
import secrets
import socket
import threading
from collections import Counter
from types import TracebackType

__all__ = ["CommandCounter"]

_LINE = re.compile(rb'^\+[\d.]+ \[\d+ ([^\]]+)\] "([^"]*)"(.*)$')


class CommandCounter:
    """``with CommandCounter(port) as seen: ...``; then ``seen.commands`` maps each command
    name (lower case) to how many times clients sent it inside the block."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.host, self.port = host, port
        self.commands: Counter[str] = Counter()
        #: every command with its arguments as MONITOR shows them, in order
        self.lines: list[str] = []
        #: the same for the commands scripts ran inside the server (not round trips)
        self.scripted: list[str] = []
        self._marker = f"lockkit-bench-end-{secrets.token_hex(8)}".encode()
        self._sock: socket.socket | None = None
        self._reader: threading.Thread | None = None

    @property
    def total(self) -> int:
        """Every command clients sent, scripts' own commands left out."""
        return sum(self.commands.values())

    def __enter__(self) -> CommandCounter:
        self._sock = socket.create_connection((self.host, self.port), timeout=30)
        self._sock.sendall(b"MONITOR\r\n")
        stream = self._sock.makefile("rb")
        if stream.readline() != b"+OK\r\n":
            raise RuntimeError(f"redis at {self.host}:{self.port} refused MONITOR")
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._reader.start()
        return self

    def _read(self, stream: object) -> None:
        for line in iter(stream.readline, b""):  # type: ignore[attr-defined]
            if self._marker in line:
                return
            found = _LINE.match(line)
            if found is None:
                continue
            name = found.group(2).decode().lower()
            rest = found.group(3).decode(errors="replace").strip()
            if found.group(1) == b"lua":
                self.scripted.append(f"{name} {rest}")
            else:
                self.commands[name] += 1
                self.lines.append(f"{name} {rest}")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # The end marker travels through the same MONITOR stream, after everything before it.
        with socket.create_connection((self.host, self.port), timeout=30) as other:
            other.sendall(b"ECHO " + self._marker + b"\r\n")
            other.recv(256)
        assert self._reader is not None and self._sock is not None
        self._reader.join(30)
        self._sock.close()
        if self._reader.is_alive():
            raise RuntimeError("the MONITOR stream did not deliver the end marker within 30 s")
