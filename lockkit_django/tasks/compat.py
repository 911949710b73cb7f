"""Django's tasks framework: ``django.tasks`` (Django 6) when present, else the ``django_tasks``
backport (``pip install "lockkit[django-tasks]"``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["Task", "TaskResult", "TaskResultDoesNotExist", "task", "task_started"]

if TYPE_CHECKING:
    from django_tasks import TaskResult, task
    from django_tasks.base import Task
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_started
else:
    try:
        from django.tasks.base import Task, TaskResult, task
        from django.tasks.exceptions import TaskResultDoesNotExist
        from django.tasks.signals import task_started
    except ImportError:
        try:
            from django_tasks.base import Task, TaskResult, task
            from django_tasks.exceptions import TaskResultDoesNotExist
            from django_tasks.signals import task_started
        except ImportError as exc:
            raise ImportError(
                "lockkit_django.tasks needs Django 6's django.tasks or the django-tasks "
                'backport: pip install "lockkit[django-tasks]"'
            ) from exc
