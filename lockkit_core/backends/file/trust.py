"""Who may touch a ``file://`` lock directory: the checks that keep other users out of it.

Whoever may remove or replace a record can free a lock held here, or forge one. Every lock
directory, the default one under the temp dir and any other alike, is checked when a backend
opens it (:func:`check_directory`), and every record and the fence counter when they are
opened (:func:`check_record_file`).
"""

from __future__ import annotations

import os
import stat

from ...errors import BackendUnavailable, ConfigError

__all__ = ["check_directory", "check_record_file"]


def check_directory(path: str, st: os.stat_result) -> None:
    """Refuse a lock directory another user could tamper with (:class:`ConfigError`).

    It must be a real
    directory (not a symbolic link) owned by this user or root, that no other user may
    write, unless it is sticky as ``/tmp`` is: there others may add files but not remove or
    rename ours, and :func:`check_record_file` then refuses any record that is not ours.
    """
    uid = os.getuid()
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(
            f"the file:// lock directory {path!r} is a symbolic link: whoever may change the "
            f"link decides where the locks are; name the directory itself "
            f"({os.path.realpath(path)!r})"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"the file:// lock directory {path!r} is not a directory")
    if st.st_uid not in (uid, 0):
        raise ConfigError(
            f"the file:// lock directory {path!r} is owned by uid {st.st_uid}, not by this "
            f"user (uid {uid}): its owner could remove the record of a lock held here. Use a "
            "directory of this user's own, or remove this one"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
        raise ConfigError(
            f"the file:// lock directory {path!r} (mode {mode:o}) may be written by other "
            f"users, who could remove the record of a lock held here: chmod go-w it, or make "
            "it sticky (chmod +t, as /tmp is) so that nobody removes another user's files"
        )


def check_record_file(fd: int, path: str) -> None:
    """Refuse a record (or fence) file that is not a regular file of this user's own: in a
    sticky shared directory another user may have made it first, to rewrite it at will."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        raise BackendUnavailable(
            f"{path!r} is not a lock record of this user (uid {os.getuid()}): it is "
            + (
                "not a regular file"
                if not stat.S_ISREG(st.st_mode)
                else f"owned by uid {st.st_uid}"
            )
            + ", and whoever owns it could rewrite the lock; remove it (it was made by someone "
            "else in the shared lock directory)"
        )
