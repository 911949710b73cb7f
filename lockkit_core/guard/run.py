"""Run one request under a rule: the skeleton both web adapters share, sync and async.

An adapter supplies its request, the key's values, the view as ``call``, and
:class:`Hooks`: how its framework answers a refusal, where the view finds its lock, and what
ends the response (so the release hangs there). Everything else is decided here once: a
request whose method does not lock runs as is (its lock is None), a busy lock goes to the
rule's ``on_busy`` and any other refusal to the framework's answer, a view that raises
releases at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..lock import Lock
from .outcome import GuardContext, Outcome
from .problems import Problem, RequestLocked
from .request_key import KeyFunc
from .rule import RequestRule

__all__ = ["Hooks", "Values", "arun", "begin", "run"]

R = TypeVar("R")
T = TypeVar("T")
#: The URL arguments and sources a template reads, or a function calling the key function.
Values = Mapping[str, Any] | Callable[[KeyFunc], object]


@dataclass(frozen=True)
class Hooks(Generic[R]):
    """What a web framework supplies for one request's guard."""

    #: The framework's answer to ``problem``; ``answer`` is what the rule's ``on_busy``
    #: returned for a busy lock (None otherwise). It may raise (Flask's HTTP errors).
    refuse: Callable[[Problem, Any], R]
    #: Where the view finds its lock (None: this request is not locked).
    expose: Callable[[Lock | None], None]
    #: Hang ``outcome.release`` on whatever ends ``response`` (its close, the request's end).
    attach: Callable[[R, Outcome], R]


def _sync(read: Callable[[], T]) -> Awaitable[T]:
    async def now() -> T:
        return read()

    return now()


def begin(
    rule: RequestRule, context: GuardContext, request: Any, route: str, values: Values,
    hooks: Hooks[R],
) -> Outcome | R:  # fmt: skip
    """The held (or not locked) outcome for ``request``, or the framework's refusal."""
    if not rule.applies(context, request.method or ""):
        hooks.expose(None)
        return Outcome(route=route)
    return _settle(rule, request, rule.decide(context, route, values), hooks)


def _settle(rule: RequestRule, request: Any, outcome: Outcome, hooks: Hooks[R]) -> Outcome | R:
    refusal = outcome.refusal
    if refusal is None:
        hooks.expose(outcome.lock)
        return outcome
    if isinstance(refusal, RequestLocked) and rule.on_busy is not None:
        return hooks.refuse(refusal, rule.on_busy(request, refusal))
    return hooks.refuse(refusal, None)


def run(
    rule: RequestRule, context: GuardContext, request: Any, route: str, values: Values,
    call: Callable[[], R], hooks: Hooks[R],
) -> R:  # fmt: skip
    """Run ``call`` (the view) under ``rule``'s lock for ``request``."""
    outcome = begin(rule, context, request, route, values, hooks)
    if not isinstance(outcome, Outcome):
        return outcome
    try:
        response = call()
    except BaseException:
        outcome.release()
        raise
    return hooks.attach(response, outcome) if outcome.lock is not None else response


async def arun(
    rule: RequestRule, context: GuardContext, request: Any, route: str, values: Values,
    call: Callable[[], Awaitable[R]], hooks: Hooks[R],
    read: Callable[[Callable[[], str | Outcome]], Awaitable[str | Outcome]] = _sync,
) -> R:  # fmt: skip
    """:func:`run` for async code. ``read`` runs the key's reading of the request (a user, a
    session: Django passes ``sync_to_async``); the lock is awaited on the event loop
    (:meth:`RequestRule.aacquire`): no thread waits for it, on a store with an asyncio API."""
    if not rule.applies(context, request.method or ""):
        hooks.expose(None)
        return await call()
    key = await read(lambda: rule.key_for(context, route, values))
    if isinstance(key, Outcome):
        outcome = key
    else:
        outcome = await rule.aacquire(context, route, key)
    settled = _settle(rule, request, outcome, hooks)
    if not isinstance(settled, Outcome):
        return settled
    try:
        response = await call()
    except BaseException:
        await outcome.arelease()
        raise
    return hooks.attach(response, outcome) if outcome.lock is not None else response
