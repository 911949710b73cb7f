"""lockkit: distributed locks that are safe and boring.

>>> from lockkit_core import LockKit
>>> kit = LockKit("memory://doctest")
>>> with kit.lock("order:42", timeout=5) as held:
...     held.token
1
"""

from .admin import Admin, BackendInfo, LockInfo
from .backends.base import Backend, Capability, Grade, Grant, Lease
from .config import LockKitConfig
from .errors import (
    BackendError,
    BackendNotInstalled,
    BackendUnavailable,
    ConfigError,
    LockError,
    LockKitError,
    LockLost,
    LockNotOwned,
    LockTimeout,
    LockUnavailable,
    NotSupported,
)
from .keys import KeyTemplate
from .kit import LockKit
from .lock import Lock
from .registry import known_schemes
from .rwlock import RWLock
from .semaphore import Semaphore
from .shared import SharedLock
from .url import LockURL, parse_url

__all__ = [
    "Admin",
    "Backend",
    "BackendError",
    "BackendInfo",
    "BackendNotInstalled",
    "BackendUnavailable",
    "Capability",
    "ConfigError",
    "Grade",
    "Grant",
    "KeyTemplate",
    "Lease",
    "Lock",
    "LockError",
    "LockInfo",
    "LockKit",
    "LockKitConfig",
    "LockKitError",
    "LockLost",
    "LockNotOwned",
    "LockTimeout",
    "LockURL",
    "LockUnavailable",
    "NotSupported",
    "RWLock",
    "Semaphore",
    "SharedLock",
    "known_schemes",
    "parse_url",
]
__version__ = "0.1.0"
