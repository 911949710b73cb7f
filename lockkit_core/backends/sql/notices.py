"""The name of a key's release notices, shared by the releasing and the waiting side."""

from __future__ import annotations

import hashlib

__all__ = ["notify_channel"]


def notify_channel(table: str, key: str) -> str:
    """PostgreSQL's ``NOTIFY`` channel for ``key``: 8 + 40 characters, within its limit of
    63, and a digest so that any key (any length, any character) makes a valid name."""
    data = f"{table}\0{key}".encode("utf-8", "surrogatepass")
    return "lockkit_" + hashlib.sha1(data).hexdigest()  # noqa: S324
