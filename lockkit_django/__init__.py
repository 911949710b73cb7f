"""lockkit for Django: ``settings.LOCKKIT``, system checks, and locked views.

>>> INSTALLED_APPS = [..., "lockkit_django"]
>>> LOCKKIT = {"URL": "redis://127.0.0.1:6379/0", "NAMESPACE": "shop"}

::

    @lock_view("order:{order_id}", wait=2)
    def pay(request, order_id): ...

    @idempotent(required=True)      # Idempotency-Key: replay the first response to retries
    def charge(request): ...

Thin over :mod:`lockkit_core.guard`: every lock decision is the core's. See
:mod:`lockkit_django.sources` for what a key template may name.
"""

from .conf import get_kit
from .fencing import fenced_update, optimistic_update
from .idempotency.views import idempotent
from .problems import (
    PROBLEM_JSON,
    IdempotencyKeyInFlight,
    IdempotencyKeyInvalid,
    IdempotencyKeyReused,
    IdempotencyStoreDown,
    LockStoreDown,
    RequestKeyInvalid,
    RequestKeyMissing,
    RequestLocked,
)
from .signals import lock_lost
from .sources import SOURCES
from .views import LockViewMixin, lock_view

__all__ = [
    "PROBLEM_JSON",
    "SOURCES",
    "IdempotencyKeyInFlight",
    "IdempotencyKeyInvalid",
    "IdempotencyKeyReused",
    "IdempotencyStoreDown",
    "LockStoreDown",
    "LockViewMixin",
    "RequestKeyInvalid",
    "RequestKeyMissing",
    "RequestLocked",
    "fenced_update",
    "get_kit",
    "idempotent",
    "lock_lost",
    "lock_view",
    "optimistic_update",
]
