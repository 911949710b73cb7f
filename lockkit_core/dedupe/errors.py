"""``TaskLocked``: the one error task deduplication adds to the core's tree."""

from __future__ import annotations

from ..errors import LockUnavailable

__all__ = ["TaskLocked"]


class TaskLocked(LockUnavailable):
    """The task's lock is held by another call; ``.task_id`` names the task that holds it
    (None when it could not be told), ``.key`` the lock key and ``.countdown`` the seconds
    until that task's lease runs out at the latest (None when unknown), like celery-once's
    ``AlreadyQueued.countdown``: retry after it."""

    def __init__(
        self, key: str, task_id: str | None, message: str, countdown: float | None = None
    ) -> None:
        self.task_id = task_id
        self.countdown = countdown
        super().__init__(key, message)

    def __reduce__(
        self,
    ) -> tuple[type[TaskLocked], tuple[str, str | None, str, float | None]]:
        return (type(self), (self.key, self.task_id, str(self), self.countdown))
