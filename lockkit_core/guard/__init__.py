"""The request guard both web adapters use: a rule over named request sources decides, for
one request, held / busy / store down / not locked, and carries the answer (status, headers,
an RFC 9457 problem body), the log line and the count.

::

    rule = RequestRule("order:{order_id}:{user}", sources=SOURCES, wait=2, methods=["POST"])
    hooks = Hooks(refuse=framework_refusal, expose=set_request_lock, attach=release_at_close)
    response = run(rule, context, request, route, values, view, hooks)   # or await arun(...)

``run``/``arun`` hold the one request flow (lock or not, refuse, run, release on error,
hand the release to the adapter's ``attach``); ``begin`` is its first half, for a hook that
runs before the view (a Flask blueprint's ``before_request``).

Nothing here imports a web framework; Flask and Django supply the sources and the responses.
"""

from .credentials import Secret, credential_digest, credential_item
from .outcome import Counts, GuardContext, LostHook, Outcome, Problems
from .problems import (
    PROBLEM_JSON,
    LockStoreDown,
    Problem,
    RequestKeyInvalid,
    RequestKeyMissing,
    RequestLocked,
)
from .request_key import WEB_SOURCES, KeyFunc, RequestKey, Source, UserValue
from .rule import HTTP_METHODS, RequestRule, Scope
from .run import Hooks, Values, arun, begin, run
from .settings import GUARD_SETTINGS, GuardSettings, check_request_wait

__all__ = [
    "GUARD_SETTINGS",
    "HTTP_METHODS",
    "PROBLEM_JSON",
    "WEB_SOURCES",
    "Counts",
    "GuardContext",
    "GuardSettings",
    "Hooks",
    "KeyFunc",
    "LockStoreDown",
    "LostHook",
    "Outcome",
    "Problem",
    "Problems",
    "RequestKey",
    "RequestKeyInvalid",
    "RequestKeyMissing",
    "RequestLocked",
    "RequestRule",
    "Scope",
    "Secret",
    "Source",
    "UserValue",
    "Values",
    "arun",
    "begin",
    "check_request_wait",
    "credential_digest",
    "credential_item",
    "run",
]
