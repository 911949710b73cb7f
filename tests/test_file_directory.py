"""Every ``file://`` directory is checked as the default one is: a real directory owned by this
user (or root), that no other user may write unless it is sticky (as /tmp is), and then every
record in it must be this user's own. Otherwise another user could remove or rewrite the record
of a lock we hold, and take it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockkit_core import BackendUnavailable, ConfigError, LockKit
from lockkit_core.backends.file import file_name

#: "nobody" on Debian: a user other than the one running the tests
OTHER_UID = 65534
as_root = pytest.mark.skipif(
    not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to own files as another user"
)


def _directory(tmp_path: Path, mode: int, uid: int | None = None) -> Path:
    path = tmp_path / "locks"
    path.mkdir()
    if uid is not None:
        os.chown(path, uid, -1)
    os.chmod(path, mode)
    return path


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722, 0o702])
def test_a_directory_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = _directory(tmp_path, mode)
    with pytest.raises(ConfigError) as caught:
        LockKit(f"file://{path}")
    message = str(caught.value)
    assert str(path) in message and oct(mode)[2:] in message and "sticky" in message


@pytest.mark.parametrize("mode", [0o700, 0o750, 0o755, 0o1777, 0o1770])
def test_a_private_readable_or_sticky_directory_is_accepted(tmp_path: Path, mode: int) -> None:
    path = _directory(tmp_path, mode)
    with LockKit(f"file://{path}") as kit, kit.lock("k", timeout=0) as held:
        assert held.owned()


@as_root
@pytest.mark.parametrize("mode", [0o755, 0o777, 0o1777])
def test_a_directory_of_another_user_is_refused(tmp_path: Path, mode: int) -> None:
    path = _directory(tmp_path, mode, uid=OTHER_UID)
    with pytest.raises(ConfigError) as caught:
        LockKit(f"file://{path}")
    assert str(OTHER_UID) in str(caught.value)


def test_a_symlink_as_the_directory_is_refused(tmp_path: Path) -> None:
    real = _directory(tmp_path, 0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="symbolic link"):
        LockKit(f"file://{link}")


@as_root
def test_in_a_sticky_shared_directory_a_record_of_another_user_is_refused(
    tmp_path: Path,
) -> None:
    path = _directory(tmp_path, 0o1777)
    planted = path / file_name("planted")
    planted.write_bytes(b"")
    os.chown(planted, OTHER_UID, -1)
    with LockKit(f"file://{path}") as kit:
        with pytest.raises(BackendUnavailable) as caught:
            kit.lock("planted").acquire(timeout=0)
        assert str(OTHER_UID) in str(caught.value) and str(planted) in str(caught.value)
        with kit.lock("mine", timeout=0) as held:  # records of our own are used as usual
            assert held.owned()
            assert (path / file_name("mine")).stat().st_uid == os.getuid()


@as_root
def test_the_default_directory_keeps_its_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    default = tmp_path / f"lockkit-{os.getuid()}"
    default.mkdir(mode=0o700)
    os.chown(default, OTHER_UID, -1)
    with pytest.raises(ConfigError, match=str(OTHER_UID)):
        LockKit("file://")
