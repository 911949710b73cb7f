"""``file://`` is single-host: a lock directory written by another host (NFS) is refused with
a ``ConfigError``, never treated as stale."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from lockkit_core import ConfigError, LockKit
from lockkit_core.backends.base import owner_hint
from lockkit_core.backends.file import FileBackend, file_name
from lockkit_core.backends.file.record import encode
from lockkit_core.keys import namespaced
from lockkit_core.registry import create_backend

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="file:// needs fcntl")

OWNER_A = "a" * 32
OWNER_B = "b" * 32
OTHER_BOOT = b"11111111-2222-3333-4444-555555555555"


def plant(backend: FileBackend, key: str, boot: bytes, host: bytes) -> None:
    """Write a held record for ``key`` as a process of ``host`` booted as ``boot`` would."""
    path = os.path.join(backend.directory, file_name(key))
    tail = b"4242 4026531836 %s %s" % (boot, host)
    expires = time.monotonic() + 60.0
    with open(path, "wb") as f:
        f.write(encode(7, OWNER_A.encode(), expires, 60.0, tail, key.encode(), b""))


def test_a_record_written_by_another_host_is_refused_not_taken(backend: FileBackend) -> None:
    plant(backend, "shared", OTHER_BOOT, b"db-2.example.net")
    with pytest.raises(ConfigError) as caught:
        backend.try_acquire("shared", OWNER_B, 30.0)
    message = str(caught.value)
    assert "single-host" in message and "db-2.example.net" in message
    for scheme in ("redis://", "zookeeper://", "etcd://"):
        assert scheme in message
    with pytest.raises(ConfigError):
        backend.list("")
    with pytest.raises(ConfigError):
        backend.info("shared")
    with pytest.raises(ConfigError):
        backend.force_release("shared")


def test_a_kit_on_a_shared_directory_raises_config_error(backend: FileBackend, url: str) -> None:
    kit = LockKit(url, auto_renew=False)
    plant(backend, namespaced(kit.namespace, "shared"), OTHER_BOOT, b"db-2.example.net")
    try:
        with pytest.raises(ConfigError, match="single-host"):
            kit.lock("shared").acquire(blocking=False)
        with pytest.raises(ConfigError, match="single-host"):
            kit.admin.list()
    finally:
        kit.close()


def test_this_hosts_own_records_are_not_foreign(backend: FileBackend) -> None:
    # Another boot of this host (same name): stale, free.
    plant(backend, "rebooted", OTHER_BOOT, backend._store.host)
    grant = backend.try_acquire("rebooted", OWNER_B, 30.0)
    assert grant.acquired and grant.token == 8
    # Another container of this kernel (same boot id, its own host name): held, not foreign.
    plant(backend, "container", backend._store.boot, b"container-1")
    assert not backend.try_acquire("container", OWNER_B, 30.0).acquired
    assert [lease.key for lease in backend.list("")] == ["container", "rebooted"]


def test_records_keep_a_digest_of_the_owner_token_not_the_token(
    backend: FileBackend, url: str
) -> None:
    owner = "f3" * 16
    odd = "celery-task:\u00e9 id"
    assert backend.try_acquire("secret", owner, 30.0).acquired
    assert backend.try_acquire("odd", odd, 30.0).acquired
    waiter = backend.waiter("secret", OWNER_B, False)
    assert not backend.try_acquire("secret", OWNER_B, 30.0).acquired  # queued: in the record
    try:
        raw = b"".join(p.read_bytes() for p in Path(backend.directory).iterdir())
        for token in (owner, OWNER_B, odd):
            assert token.encode() not in raw
            assert token.encode().hex().encode() not in raw
        # What a reader of the record sees does not let it act as the owner.
        first_line = Path(backend.directory, file_name("secret")).read_bytes().split(b"\n")[0]
        stored = first_line.split(b" ")[2].decode()
        other = create_backend(url)
        assert other.release("secret", stored) is False
        assert other.extend("secret", stored, 30.0) is False
        other.close()
        info = backend.info("secret")
        assert info is not None and info.owner_hint == owner_hint(owner)
        odd_info = backend.info("odd")
        assert odd_info is not None and odd_info.owner_hint == owner_hint(odd)
        assert backend.extend("secret", owner, 30.0)
    finally:
        waiter.close(False)
    assert backend.release("secret", owner) is True
    assert backend.release("odd", odd) is True
