"""lockkit for Flask: per-route locks that answer 409 when busy.

>>> from flask import Flask
>>> from lockkit_flask import LockKit, lock_route
>>> app = Flask(__name__)
>>> locks = LockKit(app)                       # LOCKKIT_URL, LOCKKIT_NAMESPACE, ... from app.config
>>> @app.put("/seats/<int:seat>")
... @lock_route("seat:{seat}", wait=2)
... def book(seat):
...     return {"seat": seat}

Thin over :mod:`lockkit_core`: every lock decision is the core's. See
:mod:`lockkit_flask.keys` for what a key template may name.
"""

from .errors import LockStoreUnavailable, RouteKeyMissing, RouteLocked
from .extension import LockKit, LockKitState, state_of
from .keys import SOURCES, RouteKey
from .route import OnBusy, RouteRule, lock_blueprint, lock_route

__all__ = [
    "SOURCES",
    "LockKit",
    "LockKitState",
    "LockStoreUnavailable",
    "OnBusy",
    "RouteKey",
    "RouteKeyMissing",
    "RouteLocked",
    "RouteRule",
    "lock_blueprint",
    "lock_route",
    "state_of",
]
