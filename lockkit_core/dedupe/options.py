"""The lock options of one task, as every task-queue adapter decides them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TaskOptions"]


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
