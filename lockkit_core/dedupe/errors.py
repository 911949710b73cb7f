"""``TaskLocked``: the one error task deduplication adds to the core's tree."""

from __future__ import annotations

from ..errors import LockUnavailable

__all__ = ["TaskLocked"]


class TaskLocked(LockUnavailable):
    """The task's lock is held by another call; ``.task_id`` names the task that holds it
    (None when it could not be told) and ``.key`` the lock key."""

    def __init__(self, key: str, task_id: str | None, message: str) -> None:
        self.task_id = task_id
        super().__init__(key, message)

    def __reduce__(self) -> tuple[type[TaskLocked], tuple[str, str | None, str]]:
        return (type(self), (self.key, self.task_id, str(self)))
