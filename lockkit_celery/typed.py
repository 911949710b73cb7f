"""What type checkers see of a ``@locked_task`` function: the function's own signature.

Celery ships no type hints, so a decorated task would otherwise be ``Any`` and a wrong
argument to ``delay()`` would pass unchecked. :class:`TypedTask` keeps the parameters of the
decorated function for calling it, ``delay()`` and ``delay_on_commit()`` (``bind=True``
drops the first, the task itself, as Celery does). At run time the object is the Celery task.
"""

from __future__ import annotations

from typing import Any, ParamSpec, Protocol, TypeVar

__all__ = ["TypedTask"]

P = ParamSpec("P")
R_co = TypeVar("R_co", covariant=True)


class TypedTask(Protocol[P, R_co]):
    """A Celery task made by ``@locked_task`` from a function ``(*P) -> R``."""

    name: str

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        """Run the task here, in this process, without locks (as Celery does)."""

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Enqueue a call; the ``AsyncResult`` of it, or of the duplicate already queued."""

    def delay_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Enqueue when Django's current transaction commits."""

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Celery's ``apply_async``; ``lockkit={...}`` overrides lock options per call."""
