"""A stale lock holder racing newer ones across processes, writing one row on PostgreSQL.

Three processes take the same Redis lock in turn. The first is paused (SIGSTOP) past its ttl
while it holds the lock, so the others get it and write; then it wakes and writes as if it
still held it. fenced_update refuses that stale write; a plain UPDATE lets it through and
overwrites the newer holders' work, which is the race fencing exists for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from djproject.models import Account

from lockkit_core import LockKit
from lockkit_core.testing import RedisServer

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.redis,
    pytest.mark.django_db(databases=["pg"], transaction=True),
]

TESTS = Path(__file__).parent
KEY = "account:race"
TTL = 1.0


class Writer:
    """One fence_writer_process.py, read line by line."""

    def __init__(self, url: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(TESTS / "fence_writer_process.py"), url, KEY, str(TTL)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=TESTS,
            env={**os.environ, **env, "PYTHONPATH": str(TESTS)},
        )

    def read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line, f"the writer exited with {self.proc.poll()}"
        return line

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def acquire(self) -> int:
        word, _, token = self.ask("acquire").partition(" ")
        assert word == "acquired", word
        return int(token)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def started(redis_server: RedisServer, pg_env: dict[str, str]) -> Iterator[list[Writer]]:
    """Three writer processes for the module (they start slowly), each connected and ready."""
    writers = [Writer(redis_server.url, pg_env) for _ in range(3)]
    try:
        for writer in writers:
            assert writer.read() == "ready"
        yield writers
    finally:
        for writer in writers:
            writer.close()


@pytest.fixture
def writers(started: list[Writer], redis_server: RedisServer) -> Iterator[list[Writer]]:
    """The writers, all on one fresh Account row."""
    account = Account.objects.using("pg").create(balance=0)
    for writer in started:
        assert writer.ask(f"row {account.pk}") == "ok"
    yield started
    with LockKit(redis_server.url, namespace="race") as kit:
        kit.admin.force_release(KEY)


def _lease_ends(redis_server: RedisServer) -> None:
    with LockKit(redis_server.url, namespace="race") as kit:
        deadline = time.monotonic() + 5 * TTL
        while kit.admin.info(KEY) is not None:
            assert time.monotonic() < deadline, "the paused holder's lease never ended"
            time.sleep(0.05)


@pytest.mark.parametrize(
    ("write", "stale_written", "final"),
    [("fenced", "written 0", 300), ("plain", "written 1", 100)],
)
def test_a_paused_holder_writes_after_newer_holders(
    writers: list[Writer], redis_server: RedisServer, write: str, stale_written: str, final: int
) -> None:
    stale, second, third = writers
    old = stale.acquire()
    stale.proc.send_signal(signal.SIGSTOP)  # a long GC pause, past its ttl
    _lease_ends(redis_server)
    tokens = [old]
    for writer, balance in ((second, 200), (third, 300)):
        tokens.append(writer.acquire())
        assert writer.ask(f"{write} {balance}") == "written 1"
        assert writer.ask("release") == "released"
    assert tokens == sorted(tokens) and len(set(tokens)) == 3  # strictly increasing
    stale.proc.send_signal(signal.SIGCONT)
    assert stale.ask(f"{write} 100") == stale_written
    assert stale.ask("release") in {"lost", "notowned"}
    row = Account.objects.using("pg").get()
    assert row.balance == final
    if write == "fenced":
        assert row.fence == tokens[-1]
