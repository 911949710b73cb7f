"""Run a sans-I/O plan with blocking or asyncio I/O.

A *plan* is a generator that decides and never waits: it yields a step (what to do), is sent
the step's outcome, and returns its result. :func:`run` performs each step with a blocking
function, :func:`arun` with a coroutine function; the decisions are written once, in the plan.
An error a step raises is thrown into the plan at its ``yield``, so a plan may catch the
store's answers that come as exceptions (a node that does not exist) where it asked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import TypeVar

__all__ = ["arun", "run"]

S = TypeVar("S")
R = TypeVar("R")
T = TypeVar("T")


def run(plan: Generator[S, R, T], do: Callable[[S], R]) -> T:
    """Drive ``plan`` to its result, performing each step with ``do``."""
    try:
        step = next(plan)
        while True:
            try:
                outcome = do(step)
            except Exception as exc:
                step = plan.throw(exc)
            else:
                step = plan.send(outcome)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        plan.close()


async def arun(plan: Generator[S, R, T], do: Callable[[S], Awaitable[R]]) -> T:
    """Drive ``plan`` to its result, awaiting each step with ``do``."""
    try:
        step = next(plan)
        while True:
            try:
                outcome = await do(step)
            except Exception as exc:
                step = plan.throw(exc)
            else:
                step = plan.send(outcome)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        plan.close()
