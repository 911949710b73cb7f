"""The whole lockkit error tree.

::

    LockKitError
    ├── ConfigError(ValueError)        bad URL, unknown scheme, bad option or argument
    │   └── BackendNotInstalled        names the extra: pip install "lockkit[redis]"
    ├── BackendError                   driver failure, original in __cause__
    │   ├── BackendUnavailable         cannot reach / authenticate to the store
    │   └── NotSupported               operation outside the backend's capabilities
    └── LockError                      carries .key
        ├── LockUnavailable            held elsewhere
        │   └── LockTimeout(TimeoutError)
        └── LockNotOwned               release/extend of a lock we do not hold
            └── LockLost               lease expired or session lost while we thought we held it

Framework adapters subclass these, so ``except LockKitError`` catches everything lockkit raises.

One warning: ``InsecureTransportWarning(UserWarning)``, a configuration that sends a
credential to the store in clear text.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendError",
    "BackendNotInstalled",
    "BackendUnavailable",
    "ConfigError",
    "InsecureTransportWarning",
    "LockError",
    "LockKitError",
    "LockLost",
    "LockNotOwned",
    "LockTimeout",
    "LockUnavailable",
    "NotSupported",
]


class LockKitError(Exception):
    """Root of every error lockkit raises."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take other arguments than ``args``; rebuild without calling __init__,
        # so Celery's result backends and multiprocessing can pickle every one of them.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[LockKitError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class ConfigError(LockKitError, ValueError):
    """A URL, option or argument is wrong; the message says how to fix it."""


class BackendNotInstalled(ConfigError):
    """The backend's client library is missing; install the named extra."""

    def __init__(self, scheme: str, extra: str, module: str) -> None:
        self.scheme = scheme
        self.extra = extra
        self.module = module
        super().__init__(
            f"the {scheme}:// backend needs the {module!r} package, which is not installed; "
            f'install it with: pip install "lockkit[{extra}]"'
        )


class BackendError(LockKitError):
    """The store or its driver failed; the driver's exception is in ``__cause__``."""


class BackendUnavailable(BackendError):
    """The store cannot be reached or refused our credentials."""


class NotSupported(BackendError):
    """The backend cannot honour this operation or option."""


class LockError(LockKitError):
    """An error about one lock; ``.key`` names it (without the namespace)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


class LockUnavailable(LockError):
    """The lock is held by someone else."""


class LockTimeout(LockUnavailable, TimeoutError):
    """The lock stayed busy for the whole timeout."""


class LockNotOwned(LockError):
    """Release or extend of a lock that this owner does not hold."""


class LockLost(LockNotOwned):
    """The lease ran out or the session was lost while we thought we held the lock."""


class InsecureTransportWarning(UserWarning):
    """The configuration sends a credential to the store in clear text (no TLS): anyone on
    the path can read it. Raised as a warning at kit construction, and logged."""
