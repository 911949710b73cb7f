"""One ``Idempotency-Key`` request, start to end: replay, refuse, or run once and keep.

::

    begin():  no key (and not required)        -> run the view, keep nothing
              no principal (user, session, SCOPE, Authorization) -> run it, keep nothing
              malformed / missing and required  -> 400
              kept response, same fingerprint   -> replay it (Idempotency-Replayed: true)
              kept response, other fingerprint  -> 422
              key's lock held by another request -> 409 + Retry-After (never waits)
              lock store or cache down          -> 503 + Retry-After, logged
              otherwise                         -> a Claim: the view runs under the key's lock
    finish(): keep the response (not a stream, not a lockkit refusal), then release the lock;
              under ATOMIC_REQUESTS both once the transaction has committed.

The lock is per scoped key (``idempotency:<digest>``), never global, taken without waiting,
and renewed while the view runs. The kept response is written before the lock is released,
and the cache is read again once the lock is held, so a retry either waits its turn (409),
or finds the response; it never runs the view a second time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from django.http import HttpRequest, HttpResponse, HttpResponseBase

from lockkit_core import BackendUnavailable, Lock, LockNotOwned

from ..conf import LockKitState, lockkit_state
from ..problems import (
    IdempotencyKeyInFlight,
    IdempotencyKeyInvalid,
    IdempotencyKeyReused,
    IdempotencyStoreDown,
    is_refusal,
    problem_response,
)
from ..release import after_commit
from .header import fingerprint, parse_key, scope_of
from .settings import IdempotencySettings
from .store import KeptResponse, keep, kept

__all__ = ["Claim", "begin", "finish"]

log = logging.getLogger("lockkit.django")
_HANDLED: Final = "_lockkit_idempotency"


@dataclass
class Claim:
    """A first request for its key: the view runs while ``lock`` is held."""

    scope: str
    fingerprint: str
    lock: Lock
    options: IdempotencySettings
    state: LockKitState


def _replay_or_reuse(found: KeptResponse, digest: str, request: HttpRequest) -> HttpResponse:
    if found.fingerprint != digest:
        lockkit_state().count("idempotency_reused")
        log.info("%s %s refused (422): Idempotency-Key reused", request.method, request.path)
        return problem_response(IdempotencyKeyReused())
    lockkit_state().count("idempotency_replayed")
    return found.replay()


def _down(request: HttpRequest, state: LockKitState, what: str, exc: BaseException) -> HttpResponse:
    state.count("unavailable")
    log.error(
        "%s %s refused (503): the idempotency %s is down: %r", request.method, request.path,
        what, exc,
    )  # fmt: skip
    return problem_response(IdempotencyStoreDown(what, state.settings.retry_after))


def begin(
    request: HttpRequest, overrides: IdempotencySettings | None = None
) -> HttpResponseBase | Claim | None:
    """Decide what to do with ``request`` (may do I/O: run it in a thread from async code).

    None: run the view as usual; a response: answer with it; a Claim: run the view, then
    :func:`finish`."""
    if getattr(request, _HANDLED, False):
        return None  # the middleware and a decorator both apply: the outer one handles it
    state = lockkit_state()
    options = overrides or state.settings.idempotency
    if request.method not in options.methods:
        return None
    try:
        key = parse_key(request, options)
    except IdempotencyKeyInvalid as exc:
        state.count("idempotency_invalid")
        log.info("%s %s refused (400): %s", request.method, request.path, exc)
        return problem_response(exc)
    if key is None:
        return None
    setattr(request, _HANDLED, True)
    scope = scope_of(request, key, options)
    if scope is None:
        # Any caller could send this key: replaying would hand one caller's response to
        # another, so nothing is kept for a caller nothing identifies.
        state.count("idempotency_unscoped")
        log.info(
            "%s %s: Idempotency-Key not honoured: no signed-in user, session, Authorization "
            "header or SCOPE tells this caller from another (see lockkit.W006)",
            request.method, request.path,
        )  # fmt: skip
        return None
    return _claim(request, scope, options, state)


def _lookup(
    request: HttpRequest, scope: str, digest: str, options: IdempotencySettings,
    state: LockKitState,
) -> HttpResponseBase | None:  # fmt: skip
    """The kept response's answer (a replay or a 422), a 503 if the cache is down, or None."""
    try:
        found = kept(options.cache, scope)
    except Exception as exc:  # any cache backend's failure: fail closed
        return _down(request, state, f"cache {options.cache!r}", exc)
    return None if found is None else _replay_or_reuse(found, digest, request)


def _claim(
    request: HttpRequest, scope: str, options: IdempotencySettings, state: LockKitState
) -> HttpResponseBase | Claim:
    digest = fingerprint(request)
    answer = _lookup(request, scope, digest, options, state)
    if answer is not None:
        return answer
    lock = state.kit.lock(f"idempotency:{scope}", reentrant=False)
    try:
        held = lock.acquire(blocking=False)
    except BackendUnavailable as exc:
        return _down(request, state, "lock store", exc)
    if not held:
        state.count("busy")
        log.info("%s %s refused (409): Idempotency-Key in flight", request.method, request.path)
        return problem_response(IdempotencyKeyInFlight(lock.key, state.settings.retry_after))
    answer = _lookup(request, scope, digest, options, state)  # the first may have just ended
    if answer is not None:
        _release(lock)
        return answer
    return Claim(scope, digest, lock, options, state)


def finish(claim: Claim, response: HttpResponseBase | None) -> None:
    """Keep ``response`` for replay (None: the view raised; keep nothing), then release the
    key's lock. Streams and lockkit's own refusals are passed on, not kept. Inside a
    transaction (``ATOMIC_REQUESTS``) both wait for the commit: a rolled-back request keeps
    nothing, and its key stays busy until the lock's ttl ends."""
    if response is None:
        _release(claim.lock)
    elif response.streaming or not isinstance(response, HttpResponse):
        claim.state.count("idempotency_streamed")
        log.warning(
            "a streaming response to an Idempotency-Key request is not kept; a retry runs "
            "the view again"
        )
        _release(claim.lock)
    elif is_refusal(response):
        _release(claim.lock)
    else:
        kept_response = KeptResponse.of(claim.fingerprint, response)
        after_commit(lambda: _keep_then_release(claim, kept_response))


def _keep_then_release(claim: Claim, response: KeptResponse) -> None:
    try:
        keep(claim.options.cache, claim.scope, response, claim.options.expires)
    except Exception as exc:  # the response stands; a retry will run the view again
        claim.state.count("idempotency_not_kept")
        log.error("an Idempotency-Key response could not be kept: %r", exc)
    finally:
        _release(claim.lock)


def _release(lock: Lock) -> None:
    try:
        lock.release()
    except (LockNotOwned, BackendUnavailable) as exc:
        log.error("idempotency lock %r not released cleanly: %s", lock.key, exc)
