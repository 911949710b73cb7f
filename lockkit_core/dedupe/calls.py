"""Lock keys for task calls: the task name and its arguments bound to the signature.

The same call gives the same key whatever the keyword order or positional style, in the
process that enqueues and in the worker (where a ``UUID`` arrives as its string, a
``Decimal`` or a date as text, after the queue's JSON): values are put in a canonical JSON
form before hashing.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import inspect
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..keys import KeyTemplate

__all__ = ["TaskKey", "canonical_json"]


def _plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=canonical_json)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(
        f"cannot build a lock key from {type(value).__name__} {value!r}: task arguments "
        "must be JSON-like (str, numbers, lists, dicts, UUID, dates, Decimal); "
        "pass unique_on=[...] or key=... to leave it out"
    )


def canonical_json(value: Any) -> str:
    """``value`` as JSON with sorted keys and no spaces, UUID/date/Decimal as text."""
    return json.dumps(value, sort_keys=True, default=_plain, separators=(",", ":"))


class TaskKey:
    """Builds the lock key of one task's calls.

    ``key`` is a template (``"sms:{order_id}"``) or a callable taking the task's arguments;
    without one the key is ``task:<name>:<hash>``, hashed over every argument or over the
    ``unique_on`` subset. Names are checked against the signature here, at decoration.
    """

    def __init__(
        self,
        name: str,
        run: Callable[..., Any],
        key: str | Callable[..., str] | None = None,
        unique_on: Iterable[str] | str | None = None,
    ) -> None:
        self.name = name
        self.signature = inspect.signature(run)
        params = self.signature.parameters
        if key is not None and unique_on is not None:
            raise ConfigError(f"task {name!r}: pass key= or unique_on=, not both")
        self.template = None if key is None else KeyTemplate(key)
        if self.template is not None:
            self.template.check_signature(run)
        if isinstance(unique_on, str):
            unique_on = [unique_on]
        self.unique_on: tuple[str, ...] | None = None
        if unique_on is not None:
            names = tuple(unique_on)
            if not names or not all(isinstance(n, str) for n in names):
                raise ConfigError(
                    f"task {name!r}: unique_on must be a non-empty list of parameter names"
                )
            missing = [n for n in names if n not in params]
            if missing:
                raise ConfigError(
                    f"task {name!r}: unique_on names {', '.join(map(repr, missing))}, which "
                    f"the task does not take; its parameters are: {', '.join(params) or '(none)'}"
                )
            self.unique_on = names

    def __call__(self, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None) -> str:
        """The key of one call; a call that does not fit the signature is a ``TypeError``."""
        args = tuple(args or ())
        kwargs = dict(kwargs or {})
        if self.template is not None:
            return self.template.render(self.signature, args, kwargs)
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values: dict[str, Any] = {}
        for pname, param in self.signature.parameters.items():
            if self.unique_on is not None and pname not in self.unique_on:
                continue
            value = bound.arguments.get(pname)
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                values.update({f"**{k}": v for k, v in (value or {}).items()})
            elif param.kind is inspect.Parameter.VAR_POSITIONAL:
                values["*" + pname] = list(value or ())
            else:
                values[pname] = value
        digest = hashlib.sha256(canonical_json(values).encode()).hexdigest()[:32]
        return f"task:{self.name}:{digest}"
