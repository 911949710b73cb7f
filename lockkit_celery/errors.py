"""``TaskLocked``, shared by every task adapter (it lives in :mod:`lockkit_core.dedupe`)."""

from __future__ import annotations

from lockkit_core.dedupe.errors import TaskLocked

__all__ = ["TaskLocked"]
