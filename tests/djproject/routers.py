"""Database routing for the test project: the task queue's tables live on ``default`` only."""

from __future__ import annotations

from typing import Any

#: django_tasks_db's app label; its migration 0016 updates rows through the default manager
#: (not the database being migrated), so migrating it on ``pg`` alone reads ``default``.
TASKS_APP = "django_tasks_database"


class TasksOnDefault:
    """Keep the task tables (``TASKS`` stores tasks in ``default``) off the ``pg`` alias."""

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        if app_label == TASKS_APP:
            return db == "default"
        return None
