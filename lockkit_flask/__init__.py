"""lockkit for Flask: per-route locks that answer 409 when busy.

>>> from flask import Flask
>>> from lockkit_flask import LockKit, lock_route
>>> app = Flask(__name__)
>>> locks = LockKit(app)                       # LOCKKIT_URL, LOCKKIT_NAMESPACE, ... from app.config
>>> @app.put("/seats/<int:seat>")
... @lock_route("seat:{seat}", wait=2)
... def book(seat):
...     return {"seat": seat}

Thin over :mod:`lockkit_core.guard`: every lock decision is the core's. See
:mod:`lockkit_flask.sources` for what a key template may name.
"""

import warnings
from typing import Any

from lockkit_core.guard import PROBLEM_JSON, RequestRule

from .errors import LockStoreDown, RequestKeyInvalid, RequestKeyMissing, RequestLocked
from .extension import LockKit, LockKitState, lock_lost, state_of
from .route import OnBusy, lock_blueprint, lock_route
from .sources import SOURCES

__all__ = [
    "PROBLEM_JSON",
    "SOURCES",
    "LockKit",
    "LockKitState",
    "LockStoreDown",
    "OnBusy",
    "RequestKeyInvalid",
    "RequestKeyMissing",
    "RequestLocked",
    "RequestRule",
    "lock_blueprint",
    "lock_lost",
    "lock_route",
    "state_of",
]

#: Former names, one vocabulary with lockkit_django now.
_RENAMED = {
    "RouteLocked": ("RequestLocked", RequestLocked),
    "LockStoreUnavailable": ("LockStoreDown", LockStoreDown),
    "RouteKeyMissing": ("RequestKeyMissing", RequestKeyMissing),
    "RouteRule": ("RequestRule", RequestRule),
}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        new, value = _RENAMED[name]
        warnings.warn(
            f"lockkit_flask.{name} is now lockkit_flask.{new}", DeprecationWarning, stacklevel=2
        )
        return value
    raise AttributeError(f"module 'lockkit_flask' has no attribute {name!r}")
