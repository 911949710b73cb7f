"""``file://`` adoption (``Backend.adopt``) and a waiter that leaves when the store failed."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lockkit_core.backends.base import owner_hint
from lockkit_core.backends.file import FileBackend, file_name
from lockkit_core.registry import create_backend

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="file:// needs fcntl")

ROOT = Path(__file__).resolve().parents[1]
OWNER_A = "a" * 32
OWNER_B = "b" * 32

# Adopts ``key`` for ``owner`` in a process of its own; prints "<acquired> <token>".
ADOPTER = r"""
import sys
from lockkit_core.registry import create_backend
url, key, owner, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
grant = create_backend(url).adopt(key, owner, ttl)
print(grant.acquired, grant.token, flush=True)
"""


def adopt_elsewhere(url: str, key: str, owner: str, ttl: float) -> tuple[bool, str]:
    out = subprocess.run(
        [sys.executable, "-c", ADOPTER, url, key, owner, str(ttl)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    ).stdout.split()
    return out[0] == "True", out[1]


def test_adopt_renews_the_owners_lease_and_returns_its_token(
    backend: FileBackend, url: str
) -> None:
    grant = backend.try_acquire("job", OWNER_A, 8.0)  # outlives a slow process start
    assert grant.acquired
    assert adopt_elsewhere(url, "job", OWNER_A, 60.0) == (True, str(grant.token))
    info = backend.info("job")
    assert info is not None and info.token == grant.token and info.ttl_remaining is not None
    assert info.ttl_remaining > 30.0, "the adopted lease was not renewed"
    assert not backend.try_acquire("job", OWNER_B, 30.0).acquired


def test_adopt_never_takes_a_key_it_does_not_hold(backend: FileBackend, url: str) -> None:
    assert adopt_elsewhere(url, "free", OWNER_A, 30.0) == (False, "None")  # no record
    assert backend.info("free") is None
    assert backend.try_acquire("free", OWNER_A, 30.0).acquired
    assert backend.release("free", OWNER_A)
    assert adopt_elsewhere(url, "free", OWNER_A, 30.0) == (False, "None")  # released
    assert backend.info("free") is None
    assert backend.try_acquire("held", OWNER_A, 30.0).acquired
    assert adopt_elsewhere(url, "held", OWNER_B, 30.0) == (False, "None")  # someone else's
    info = backend.info("held")
    assert info is not None and info.owner_hint == owner_hint(OWNER_A)
    assert backend.try_acquire("lapsed", OWNER_A, 0.1).acquired
    time.sleep(0.2)
    assert adopt_elsewhere(url, "lapsed", OWNER_A, 30.0) == (False, "None")  # ran out
    assert backend.info("lapsed") is None


# Takes the flock of a key file and keeps it, as a process stopped inside its critical
# section would; prints "locked".
FLOCKER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


def test_a_waiter_closed_after_a_failure_makes_no_second_wait(
    backend: FileBackend, url: str
) -> None:
    other = create_backend(url)
    try:
        assert other.try_acquire("stuck", OWNER_A, 30.0).acquired
        waiter = backend.waiter("stuck", OWNER_B, False)
        assert not backend.try_acquire("stuck", OWNER_B, 30.0).acquired  # queued
        path = os.path.join(backend.directory, file_name("stuck"))
        stopped = subprocess.Popen(
            [sys.executable, "-c", FLOCKER, path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert stopped.stdout is not None and stopped.stdout.readline().strip() == "locked"
            began = time.monotonic()
            waiter.close(False, reachable=False)
            assert time.monotonic() - began < 1.0, "closing waited for the stuck flock"
        finally:
            stopped.kill()
            stopped.wait()
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the store works again
        finally:
            os.close(fd)
        assert other.release("stuck", OWNER_A)
    finally:
        other.close()


def test_a_waiter_closed_normally_leaves_the_queue(backend: FileBackend, url: str) -> None:
    other = create_backend(url)
    try:
        assert other.try_acquire("k", OWNER_A, 30.0).acquired
        waiter = backend.waiter("k", OWNER_B, False)
        assert not backend.try_acquire("k", OWNER_B, 30.0).acquired
        waiter.close(False)
        assert other.release("k", OWNER_A)
        assert other.info("k") is None, "the key went to a waiter that had left"
    finally:
        other.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="wake-up sockets are Linux's")
def test_a_hand_over_to_a_waiter_that_could_not_leave_is_passed_on(
    backend: FileBackend, url: str
) -> None:
    holder, third = create_backend(url), create_backend(url)
    try:
        assert holder.try_acquire("k", OWNER_A, 30.0).acquired
        left = backend.waiter("k", OWNER_B, False)
        assert not backend.try_acquire("k", OWNER_B, 30.0).acquired  # queued first
        path = os.path.join(backend.directory, file_name("k"))
        stopped = subprocess.Popen(
            [sys.executable, "-c", FLOCKER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            assert stopped.stdout is not None and stopped.stdout.readline().strip() == b"locked"
            left.close(False, reachable=False)  # could not leave the queue
        finally:
            stopped.kill()
            stopped.wait()
        waiting = third.waiter("k", "c" * 32, False)
        assert not third.try_acquire("k", "c" * 32, 30.0).acquired  # queued second
        assert holder.release("k", OWNER_A)
        began = time.monotonic()
        grant = waiting.wait(10.0)
        assert grant is not None and grant.acquired
        assert time.monotonic() - began < 2.0, "the key sat with a waiter that had left"
        waiting.close(True)
        info = holder.info("k")
        assert info is not None and info.owner_hint == owner_hint("c" * 32)
    finally:
        holder.close()
        third.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="wake-up sockets are Linux's")
def test_a_hand_over_seen_in_the_record_is_never_passed_on(backend: FileBackend, url: str) -> None:
    # The race: the releaser is slow to send its datagram; meanwhile the waiter reads the
    # record, takes the lock and closes its socket; the datagram is then refused.
    holder = create_backend(url)
    assert isinstance(holder, FileBackend)
    try:
        assert holder.try_acquire("k", OWNER_A, 30.0).acquired
        waiting = backend.waiter("k", OWNER_B, False)
        assert not backend.try_acquire("k", OWNER_B, 30.0).acquired
        done = holder._store.locked("k", False, holder._grants.release, OWNER_A)
        assert done is not None and done[0] and done[1] is not None  # handed, not yet told
        grant = waiting.wait(5.0)
        assert grant is not None and grant.acquired
        waiting.close(True)
        backend._bells.close()  # its socket is gone
        holder._wake("k", done[1])  # the late datagram is refused
        info = holder.info("k")
        assert info is not None and info.owner_hint == owner_hint(OWNER_B), "taken from its holder"
        assert backend.release("k", OWNER_B) is True
    finally:
        holder.close()
