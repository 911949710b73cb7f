"""A child forked below Python (libc's ``fork()``: no at-fork hook runs, as uWSGI without
``--py-call-uwsgi-fork-hooks``) that only reads a lock (``admin.info``) before any
acquisition of its own, on postgres://: its statement must not run in its parent's database
session, whose socket the child shares (a parent using it at the same time would read the
child's reply as its own)."""

from __future__ import annotations

import os
import uuid

import pytest
from forking import LIBC_FORK, in_child, run_case

from lockkit_core import LockKit
from lockkit_core.testing import PostgresServer

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()"),
]


def _session_pids(kit: LockKit) -> set[int]:
    """The server processes of the connections the kit's pool keeps idle."""
    pool = kit.backend._pool  # type: ignore[attr-defined]
    return {conn.pgconn.backend_pid for conn in pool._idle}


@pytest.mark.parametrize("fork", [LIBC_FORK])
def test_a_c_forked_child_that_only_reads_uses_a_session_of_its_own(
    fork: str, postgres_server: PostgresServer
) -> None:
    run_case(reads_in_a_session_of_its_own, fork, url=postgres_server.url)


def reads_in_a_session_of_its_own(fork: str, url: str) -> None:
    url += "?socket_timeout=5&connect_timeout=2"
    with LockKit(url, namespace=f"f{uuid.uuid4().hex[:8]}", ttl=30) as kit:
        kit.admin.info("k")  # the parent's pool now keeps a connection idle
        parents = _session_pids(kit)
        assert parents

        def read_only() -> list[int]:
            kit.admin.info("k")
            return sorted(_session_pids(kit))

        childs = set(in_child(read_only, fork))
    shared = parents & childs
    assert not shared, (
        f"the child's read ran in its parent's database session(s) {sorted(shared)}: "
        "a fork without at-fork hooks runs the after_fork callbacks only at an acquisition"
    )


def test_a_kit_closed_before_the_fork_leaves_the_childs_descriptors_alone(
    postgres_server: PostgresServer,
) -> None:
    """A kit closed but still referenced at a fork has nothing to hand over in the child: its
    descriptors are closed, and their numbers may be someone else's by then (here a pipe of
    the program's), which the child must neither close nor reuse."""
    url = f"{postgres_server.url}?mode=advisory"
    closed = LockKit(url, namespace=f"f{uuid.uuid4().hex[:8]}")
    closed.close()
    read, write = os.pipe()  # takes the lowest free numbers: the closed kit's
    pipe = [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (read, write)]
    try:

        def child() -> list[list[int]]:
            with LockKit("memory://fork-reads").lock("k"):  # the child's first use of lockkit
                pass
            return [[os.fstat(fd).st_dev, os.fstat(fd).st_ino] for fd in (read, write)]

        assert in_child(child, "os.fork", within=30) == [list(ends) for ends in pipe]
    finally:
        os.close(read)
        os.close(write)
    assert closed is not None  # referenced until after the fork
