"""A project of one module on the framework's own ``DummyBackend`` and ``ImmediateBackend``, as
a user without any other tasks app has it: ``python djtasks_builtin.py``, in a process of its
own because django-tasks-db (installed in the test project) makes ``django.tasks``' classes
subscriptable when imported, which would hide an import that fails without it.

On ``DummyBackend``: one locked call enqueued twice, a second call once, a plain ``@task``
call twice. On ``ImmediateBackend`` (which runs the task inside ``enqueue()``, through the
framework's ``task_started`` signal): a ``once`` call enqueued twice. Prints what it saw as JSON.
"""

from __future__ import annotations

import json
import sys
from importlib.util import find_spec

import django
from django.conf import settings

# Django 6's built-in tasks framework, or the backport on older Django.
FRAMEWORK = "django.tasks" if find_spec("django.tasks") else "django_tasks"

settings.configure(
    INSTALLED_APPS=["lockkit_django"],
    TASKS={
        "default": {"BACKEND": f"{FRAMEWORK}.backends.dummy.DummyBackend"},
        "immediate": {"BACKEND": f"{FRAMEWORK}.backends.immediate.ImmediateBackend"},
    },
    LOCKKIT={"URL": "memory://djtasks-dummy"},
    USE_TZ=True,
)
django.setup()

from lockkit_django.tasks import TaskLocked, locked_task  # noqa: E402
from lockkit_django.tasks.compat import task  # noqa: E402


@locked_task(unique_on=["order_id"])
def charge(order_id: int, amount: int = 5) -> int:
    return order_id


@task()
def charge_unlocked(order_id: int, amount: int = 5) -> int:
    return order_id


RECEIPTS: list[int] = []


@locked_task(unique_on=["order_id"], once=60)
def receipt(order_id: int) -> int:
    RECEIPTS.append(order_id)
    return order_id * 10


def immediate() -> dict[str, object]:
    """``receipt(7)`` twice on ImmediateBackend, through ``.using()``."""
    now = receipt.using(backend="immediate")
    first = now.enqueue(7)
    try:
        again = now.enqueue(7)
        duplicate = {"returned": str(again.id)}
    except TaskLocked as exc:  # ImmediateBackend does not look results up either
        duplicate = {"raised": str(exc.task_id)}
    return {
        "first": str(first.id),
        "status": str(first.status),
        "value": first.return_value,
        "duplicate": duplicate,
        "runs": RECEIPTS,
    }


def main() -> None:
    first = charge.enqueue(7)
    try:
        again = charge.enqueue(7, amount=5)
        duplicate = {"returned": str(again.id)}
    except TaskLocked as exc:
        # DummyBackend does not look results up (supports_get_result is False), so the
        # duplicate is told the id instead of handed the result.
        duplicate = {"raised": str(exc.task_id)}
    other = charge.enqueue(8)
    plain = [charge_unlocked.enqueue(7), charge_unlocked.enqueue(7)]
    backend = charge.get_backend()
    print(
        json.dumps(
            {
                "framework": FRAMEWORK,
                "patched_by_tasks_db": "django_tasks_db" in sys.modules,
                "first": str(first.id),
                "first_kwargs": first.kwargs,
                "duplicate": duplicate,
                "other": str(other.id),
                "plain": [str(r.id) for r in plain],
                "stored": [str(r.id) for r in backend.results],
                "immediate": immediate(),
            }
        )
    )


if __name__ == "__main__":
    main()
