"""The stored key layout, owner ids, and the Lua script (``lua/lock.lua``) run by EVALSHA."""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import TYPE_CHECKING, Any

from ..base import owner_id

if TYPE_CHECKING:
    import redis

__all__ = ["PREFIX", "Script", "owner_id", "stored_key", "stored_keys"]

PREFIX = "lockkit:{"


def _script(name: str) -> str:
    return resources.files("lockkit_core.backends.redis").joinpath("lua", f"{name}.lua").read_text()


def stored_key(full_key: str) -> str:
    """The record's key; the braces put every key of this lock in one cluster hash slot."""
    return PREFIX + full_key + "}"


def stored_keys(lock_key: str) -> list[str]:
    """Record, fence counter, queue and queue entries of one lock, in the script's order."""
    return [lock_key, lock_key + ":f", lock_key + ":q", lock_key + ":e"]


class Script:
    """A Lua script run by EVALSHA, loaded again if the server lost it (NOSCRIPT). Calls
    pass its ``numkeys`` keys, then its arguments, flat."""

    def __init__(self, client: redis.Redis, name: str, numkeys: int) -> None:
        from redis.exceptions import NoScriptError

        self._client = client
        self._noscript = NoScriptError
        self.source = _script(name)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()  # noqa: S324 (Redis' id)
        self.numkeys = numkeys

    def __call__(self, *keys_and_args: Any) -> Any:
        try:
            return self._client.evalsha(self.sha, self.numkeys, *keys_and_args)
        except self._noscript:
            self.sha = self._client.script_load(self.source)
            return self._client.evalsha(self.sha, self.numkeys, *keys_and_args)


