"""The paused-holder race of test_django_fence_race, with the lock in each database store.

A holder is paused (SIGSTOP) past its ttl; two newer holders take the lock and write the row;
the paused one wakes and writes as if it still held the lock. With the database stores'
tokens, fenced_update refuses that stale write. The row lives on the ``pg`` alias; the lock
in ``django://pg`` (the same database), ``postgresql://``, ``mysql://`` or ``sqlite://``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from djproject.models import Account
from test_django_fence_race import KEY, TTL, Writer

from lockkit_core import LockKit
from lockkit_core.testing import PostgresServer
from lockkit_core.testing.mariadb import MariaDBServer

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.mysql,
    pytest.mark.slow,
    pytest.mark.django_db(databases=["pg"], transaction=True),
]


@pytest.fixture(params=["django", "postgresql", "mysql", "sqlite"])
def lock_url(
    request: pytest.FixtureRequest, postgres_server: PostgresServer, tmp_path: Path
) -> str:
    if request.param == "django":
        return "django://pg"
    if request.param == "postgresql":
        return postgres_server.url
    if request.param == "mysql":
        server: MariaDBServer = request.getfixturevalue("mariadb_server")
        return server.url
    return f"sqlite://{tmp_path / 'locks.db'}"


@pytest.fixture
def writers(lock_url: str, pg_env: dict[str, str]) -> Iterator[list[Writer]]:
    started = [Writer(lock_url, pg_env) for _ in range(3)]
    try:
        for writer in started:
            assert writer.read() == "ready"
        account = Account.objects.using("pg").create(balance=0)
        for writer in started:
            assert writer.ask(f"row {account.pk}") == "ok"
        yield started
    finally:
        for writer in started:
            writer.close()


def test_a_paused_holder_s_fenced_write_is_refused(writers: list[Writer], lock_url: str) -> None:
    stale, second, third = writers
    old = stale.acquire()
    stale.proc.send_signal(signal.SIGSTOP)  # a long GC pause, past its ttl
    with LockKit(lock_url, namespace="race") as kit:
        deadline = time.monotonic() + 5 * TTL
        while kit.admin.info(KEY) is not None:
            assert time.monotonic() < deadline, "the paused holder's lease never ended"
            time.sleep(0.05)
    tokens = [old]
    for writer, balance in ((second, 200), (third, 300)):
        tokens.append(writer.acquire())
        assert writer.ask(f"fenced {balance}") == "written 1"
        assert writer.ask("release") == "released"
    assert tokens == sorted(tokens) and len(set(tokens)) == 3  # strictly increasing
    stale.proc.send_signal(signal.SIGCONT)
    assert stale.ask("fenced 100") == "written 0"
    assert stale.ask("release") in {"lost", "notowned"}
    row = Account.objects.using("pg").get()
    assert (row.balance, row.fence) == (300, tokens[-1])
