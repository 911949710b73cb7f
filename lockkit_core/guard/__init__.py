"""The request guard both web adapters use: a rule over named request sources decides, for
one request, held / busy / store down / not locked, and carries the answer (status, headers,
an RFC 9457 problem body), the log line and the count.

::

    rule = RequestRule("order:{order_id}:{user}", sources=SOURCES, wait=2, methods=["POST"])
    if rule.applies(context, request.method):
        outcome = rule.decide(context, route, values)     # may wait: a thread from async code
        if outcome.refusal is not None: return framework_response(outcome.refusal)
        try: response = view()
        except BaseException: outcome.release(); raise
        attach_release(response, outcome.release)         # stream close, on_commit, or now

Nothing here imports a web framework; Flask and Django supply the sources and the responses.
"""

from .keys import KeyFunc, RequestKey, Source, UserValue
from .problems import PROBLEM_JSON, LockStoreDown, Problem, RequestKeyMissing, RequestLocked
from .rule import (
    HTTP_METHODS,
    NOT_LOCKED,
    Counts,
    GuardContext,
    LostHook,
    Outcome,
    Problems,
    RequestRule,
    Scope,
)
from .settings import GUARD_SETTINGS, GuardSettings, check_request_wait

__all__ = [
    "GUARD_SETTINGS",
    "HTTP_METHODS",
    "NOT_LOCKED",
    "PROBLEM_JSON",
    "Counts",
    "GuardContext",
    "GuardSettings",
    "KeyFunc",
    "LockStoreDown",
    "LostHook",
    "Outcome",
    "Problem",
    "Problems",
    "RequestKey",
    "RequestKeyMissing",
    "RequestLocked",
    "RequestRule",
    "Scope",
    "Source",
    "UserValue",
    "check_request_wait",
]
