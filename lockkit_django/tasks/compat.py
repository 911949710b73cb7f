"""Django's tasks framework: ``django.tasks`` (Django 6) when present, else the ``django_tasks``
backport (``pip install "lockkit[django-tasks]"``).

``GenericTask[P, T]`` is the base for a typed subclass of ``Task`` on both: the backport's
``Task`` is generic at run time, Django 6's is generic only in django-stubs, so subscripting it
there raises ``TypeError: type 'Task' is not subscriptable`` (unless django-stubs-ext has
patched it, as django-tasks-db does when imported: nothing here may rely on that)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["GenericTask", "Task", "TaskResult", "TaskResultDoesNotExist", "task", "task_started"]

if TYPE_CHECKING:
    from django_tasks import TaskResult, task
    from django_tasks.base import Task
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_started

    GenericTask = Task
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

    class _Unsubscripted:
        """``Task`` whatever it is subscripted with: ``Generic[P, T]`` beside it in the
        subclass's bases carries the type parameters at run time."""

        def __getitem__(self, params: Any) -> type[Task]:
            return Task

    GenericTask = _Unsubscripted()
