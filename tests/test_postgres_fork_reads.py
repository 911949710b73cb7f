"""A child forked below Python (libc's ``fork()``: no at-fork hook runs, as uWSGI without
``--py-call-uwsgi-fork-hooks``) that only reads a lock (``admin.info``) before any
acquisition of its own, on postgres://: its statement must not run in its parent's database
session, whose socket the child shares (a parent using it at the same time would read the
child's reply as its own)."""

from __future__ import annotations

import ctypes
import json
import os
import uuid
from typing import Any

import pytest

from lockkit_core import LockKit
from lockkit_core.testing import PostgresServer

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()"),
]

#: libc's fork() called with the GIL held (PyDLL), as a C extension would: no Python hooks run
_c_fork = ctypes.PyDLL(None).fork
_c_fork.restype = ctypes.c_int


def _in_c_forked_child(work: Any) -> Any:
    read, write = os.pipe()
    pid = _c_fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.write(write, json.dumps(work()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        seen = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return seen


def _session_pids(kit: LockKit) -> set[int]:
    """The server processes of the connections the kit's pool keeps idle."""
    pool = kit.backend._pool  # type: ignore[attr-defined]
    return {conn.pgconn.backend_pid for conn in pool._idle}


def test_a_c_forked_child_that_only_reads_uses_a_session_of_its_own(
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.url + "?socket_timeout=5&connect_timeout=2"
    with LockKit(url, namespace=f"f{uuid.uuid4().hex[:8]}", ttl=30) as kit:
        kit.admin.info("k")  # the parent's pool now keeps a connection idle
        parents = _session_pids(kit)
        assert parents

        def read_only() -> list[int]:
            kit.admin.info("k")
            return sorted(_session_pids(kit))

        childs = set(_in_c_forked_child(read_only))
    shared = parents & childs
    assert not shared, (
        f"the child's read ran in its parent's database session(s) {sorted(shared)}: "
        "a fork without at-fork hooks runs the after_fork callbacks only at an acquisition"
    )
