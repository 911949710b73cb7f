"""The lock options of one task, as every task-queue adapter decides them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..config import UNSET

__all__ = ["DEFAULTS", "TaskOptions"]

#: every option and its default, for every adapter (keyword > framework setting > this);
#: ``ttl`` UNSET means the store's TTL (30 s unless the settings say otherwise)
DEFAULTS: Final[Mapping[str, Any]] = {
    "enabled": True,
    "ttl": UNSET,
    "on_duplicate": "skip",
    "enqueue_lock": True,
    "once": None,
    "wait": 0.0,
    "enqueue_ttl": 3600.0,
    "remember": 86400.0,
}


@dataclass(frozen=True)
class TaskOptions:
    """The lock options of one task, decided (keyword > framework setting > default)."""

    enabled: bool
    ttl: float
    on_duplicate: str
    enqueue_lock: bool
    once: float | None
    wait: float
    enqueue_ttl: float
    remember: float
