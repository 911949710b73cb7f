"""Key validation, namespacing, templates bound to call arguments, and stable hashing."""

from __future__ import annotations

import hashlib
import inspect
import json
import string
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ConfigError

__all__ = ["KeyTemplate", "check_key", "namespaced", "stable_hash"]


def check_key(key: object) -> str:
    """Return ``key`` if it is a usable lock key: a non-empty ``str`` without NUL that
    encodes as UTF-8 (a lone surrogate such as ``"\\ud800"`` does not)."""
    if not isinstance(key, str):
        raise TypeError(
            f"lock keys must be str, got {type(key).__name__} {key!r}; "
            "format it first, e.g. kit.lock(f'order:{order_id}')"
        )
    if not key:
        raise ConfigError("lock key must be a non-empty string, e.g. 'order:42'")
    if "\x00" in key:
        raise ConfigError(f"lock key {key!r} contains a NUL character; remove it")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"lock key {key!r} cannot be encoded as UTF-8 (a lone surrogate at position "
            f"{exc.start}); build keys from text that was decoded properly"
        ) from None
    return key


def namespaced(namespace: str, key: str) -> str:
    """The key as stored: ``namespace:key``, or ``key`` when there is no namespace."""
    return f"{namespace}:{key}" if namespace else key


def stable_hash(value: Any) -> str:
    """A short hash of ``value`` that is the same in every process and run."""
    blob = json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class KeyTemplate:
    """A key such as ``"invoice:{invoice_id}"`` filled from a function's arguments.

    Field names are checked against the function's signature when the template is bound,
    so a typo fails at import time, not at the first call. Fields may use attribute and
    index access (``{user.id}``, ``{payload[sku]}``) like :meth:`str.format`.
    """

    def __init__(self, template: str | Callable[..., str]) -> None:
        if callable(template):
            self.template: str | None = None
            self._func: Callable[..., str] | None = template
            self.fields: tuple[str, ...] = ()
            return
        check_key(template)
        self.template = template
        self._func = None
        fields: list[str] = []
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise ConfigError(f"key template {template!r} is malformed: {exc}") from exc
        for _, name, _, _ in parsed:
            if name is None:
                continue
            root = name.split(".", 1)[0].split("[", 1)[0]
            if not root or root.isdigit():
                raise ConfigError(
                    f"key template {template!r} uses a positional field {{{name}}}; "
                    "name the argument instead, e.g. 'report:{day}'"
                )
            fields.append(root)
        self.fields = tuple(dict.fromkeys(fields))

    def check_signature(self, func: Callable[..., Any]) -> inspect.Signature:
        """Raise :class:`ConfigError` if a field is not a parameter of ``func``."""
        signature = inspect.signature(func)
        params = signature.parameters
        takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        missing = [f for f in self.fields if f not in params]
        if missing and not takes_kwargs:
            raise ConfigError(
                f"key template {self.template!r} names {', '.join(missing)}, which "
                f"{getattr(func, '__qualname__', func)!r} does not take; "
                f"its parameters are: {', '.join(params) or '(none)'}"
            )
        return signature

    def render(
        self, signature: inspect.Signature, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> str:
        """Fill the template from one call's arguments."""
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        if self._func is not None:
            return check_key(self._func(*bound.args, **bound.kwargs))
        values: dict[str, Any] = {}
        for name, param in signature.parameters.items():
            if name not in bound.arguments:
                continue
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                values.update(bound.arguments[name])
            else:
                values[name] = bound.arguments[name]
        assert self.template is not None
        try:
            return check_key(self.template.format_map(values))
        except KeyError as exc:
            raise ConfigError(
                f"key template {self.template!r} needs {exc.args[0]!r}, which this call "
                "did not pass"
            ) from None
        except (AttributeError, IndexError, TypeError) as exc:
            raise ConfigError(f"key template {self.template!r} cannot be filled: {exc}") from exc
