"""The libraries under test, each reduced to ``acquire()``/``release()`` callables per key.

Every contender gets the same lease (``TTL`` seconds) and a blocking acquire with no timeout
short enough to fire during a run; how it waits while the key is busy is the library's own
default (that is part of what is compared). Contenders are looked up by name so that worker
processes started with "spawn" can rebuild them from a string.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "BASELINES",
    "CONTENDERS",
    "PEERS",
    "TTL",
    "Contender",
    "Family",
    "LockFactory",
    "by_name",
]

#: lease given to every library, long enough that nothing expires during a run
TTL = 10.0
#: how long a blocking acquire may wait before the library gives up (never reached)
PATIENCE = 600.0

#: "store": lockkit alone on a store named by the target URL (benchmarks/results_page.py)
Family = Literal["redis", "file", "store"]
Acquire = Callable[[], object]
Release = Callable[[], object]
#: key -> (acquire, release) for a fresh handle on that key
LockFactory = Callable[[str], tuple[Acquire, Release]]


@dataclass(frozen=True)
class Contender:
    """One library (with one configuration) in the comparison."""

    name: str
    family: Family
    #: target (a redis URL or a directory) -> factory of handles
    open: Callable[[str], LockFactory]
    #: how it waits on a busy key, shown in the contention table
    waits_by: str
    #: a module that must be importable, else the contender is skipped
    requires: str | None = None

    def missing(self) -> str | None:
        """Why this contender cannot run here, or None."""
        if self.requires is None:
            return None
        try:
            found = importlib.util.find_spec(self.requires) is not None
        except ImportError:
            found = False
        return None if found else f"{self.requires} is not available"


# -- Redis --------------------------------------------------------------------------------------

#: the classic compare-and-delete release (redis.io "distributed locks" pattern)
_COMPARE_AND_DELETE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""
_RAW_POLL = 0.001


def _raw_floor(url: str) -> LockFactory:
    """``SET key token NX PX`` then an EVALSHA compare-and-delete: two round trips, no fence."""
    import redis

    client = redis.Redis.from_url(url)
    compare_and_delete = client.register_script(_COMPARE_AND_DELETE)
    ttl_ms = int(TTL * 1000)

    def factory(key: str) -> tuple[Acquire, Release]:
        token = ""

        def acquire() -> bool:
            nonlocal token
            token = secrets.token_hex(16)
            while not client.set(key, token, nx=True, px=ttl_ms):
                time.sleep(_RAW_POLL)
            return True

        def release() -> None:
            if not compare_and_delete(keys=[key], args=[token]):
                raise RuntimeError(f"raw floor lost {key!r}")

        return acquire, release

    return factory


def _lockkit(url: str, *, auto_renew: bool = True, fair: bool = False) -> LockFactory:
    from lockkit_core import LockKit

    kit = LockKit(url, ttl=TTL, auto_renew=auto_renew)

    def factory(key: str) -> tuple[Acquire, Release]:
        lock = kit.lock(key, fair=fair)
        return lock.acquire, lock.release

    return factory


def _lockkit_default(url: str) -> LockFactory:
    return _lockkit(url)


def _lockkit_no_renew(url: str) -> LockFactory:
    return _lockkit(url, auto_renew=False)


def _lockkit_fair(url: str) -> LockFactory:
    return _lockkit(url, fair=True)


def _redis_py(url: str) -> LockFactory:
    import redis

    client = redis.Redis.from_url(url)

    def factory(key: str) -> tuple[Acquire, Release]:
        lock = client.lock(key, timeout=TTL)  # defaults: blocking, sleep=0.1
        return lock.acquire, lock.release

    return factory


def _python_redis_lock(url: str) -> LockFactory:
    import redis
    import redis_lock

    client = redis.Redis.from_url(url)

    def factory(key: str) -> tuple[Acquire, Release]:
        lock = redis_lock.Lock(client, key, expire=int(TTL))
        return lock.acquire, lock.release

    return factory


def _pottery(url: str) -> LockFactory:
    import redis
    from pottery import Redlock

    client = redis.Redis.from_url(url)

    def factory(key: str) -> tuple[Acquire, Release]:
        lock = Redlock(key=key, masters={client}, auto_release_time=TTL)
        return lock.acquire, lock.release

    return factory


# -- files --------------------------------------------------------------------------------------


def _lock_path(directory: str, key: str) -> str:
    return os.path.join(directory, key.replace(":", "_") + ".lock")


def _lockkit_file(directory: str) -> LockFactory:
    return _lockkit("file://" + directory)


def _lockkit_file_no_renew(directory: str) -> LockFactory:
    return _lockkit("file://" + directory, auto_renew=False)


def _filelock(directory: str) -> LockFactory:
    from filelock import FileLock

    def factory(key: str) -> tuple[Acquire, Release]:
        lock = FileLock(_lock_path(directory, key), timeout=PATIENCE)
        return lock.acquire, lock.release

    return factory


def _portalocker(directory: str) -> LockFactory:
    import portalocker

    def factory(key: str) -> tuple[Acquire, Release]:
        lock = portalocker.Lock(_lock_path(directory, key), timeout=PATIENCE)
        return lock.acquire, lock.release

    return factory


_FILE_BACKEND = "lockkit_core.backends.file"
_FILE_WAIT = "FIFO queue, datagram on hand-over"
_REDIS_WAIT = "queue, pub/sub hand-over; bounded barging"

CONTENDERS: tuple[Contender, ...] = (
    Contender("raw floor (SET NX PX + CAD)", "redis", _raw_floor, "polls every 1 ms"),
    Contender("lockkit", "redis", _lockkit_default, _REDIS_WAIT),
    Contender("lockkit auto_renew=False", "redis", _lockkit_no_renew, _REDIS_WAIT),
    Contender("lockkit fair=True", "redis", _lockkit_fair, "FIFO queue, pub/sub hand-over"),
    Contender("redis-py Lock", "redis", _redis_py, "polls every 0.1 s (default)"),
    Contender("python-redis-lock", "redis", _python_redis_lock, "BLPOP on a signal list"),
    Contender("pottery Redlock (1 master)", "redis", _pottery, "random sleep 0-0.2 s"),
    Contender("lockkit file://", "file", _lockkit_file, _FILE_WAIT, _FILE_BACKEND),
    Contender(
        "lockkit file:// auto_renew=False",
        "file",
        _lockkit_file_no_renew,
        _FILE_WAIT,
        _FILE_BACKEND,
    ),
    Contender("filelock", "file", _filelock, "polls every 50 ms (default)"),
    Contender("portalocker", "file", _portalocker, "polls every 0.25 s (default)"),
    Contender("lockkit on the target URL", "store", _lockkit_default, "the store's own"),
)

#: the row every other row of its family is compared with
BASELINES: dict[Family, str] = {"redis": CONTENDERS[0].name, "file": "filelock"}
#: the peer library lockkit's contention targets are set against
PEERS: dict[Family, str] = {"redis": "redis-py Lock", "file": "filelock"}

_BY_NAME = {contender.name: contender for contender in CONTENDERS}


def by_name(name: str) -> Contender:
    """The contender called ``name`` (worker processes receive names, not objects)."""
    return _BY_NAME[name]
