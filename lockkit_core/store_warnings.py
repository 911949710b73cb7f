"""Stores that do not lock across a deployment: what every adapter warns about at start-up."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .config import LockKitConfig
from .url import parse_url

__all__ = ["outside_lockkit", "unshared_store_warnings"]

_PACKAGE = str(Path(__file__).resolve().parent) + os.sep  # lockkit_core/


def outside_lockkit() -> int:
    """The ``stacklevel`` of the nearest caller outside lockkit_core (for warnings.warn
    called by our caller): a warning names the line that built the kit, not ours."""
    level, frame = 2, sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level


def unshared_store_warnings(config: LockKitConfig, *, url_given: bool, setting: str) -> list[str]:
    """Why ``config``'s store may not exclude the processes of a deployment (empty: fine).
    ``setting`` names where the URL is set (``LOCKKIT_URL``), for the advice."""
    scheme = parse_url(config.url).scheme
    if scheme == "memory":
        return [
            f"{setting} is memory://: locks are held per process, so the worker processes of "
            "a deployment (gunicorn, uwsgi, celery) do not exclude each other; use "
            "redis://... or a shared file:// directory"
        ]
    if scheme == "file" and not url_given:
        return [
            f"lockkit uses its default file:// store {config.url}, under the system temp "
            "directory: services that see their own /tmp (systemd PrivateTmp, other users, "
            f"containers) share no locks with this one; set {setting} to a directory every "
            "service shares (file:///var/lib/myapp/locks) or to a lock server (redis://...)"
        ]
    return []
