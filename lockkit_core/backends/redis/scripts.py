"""The stored key layout, owner ids, and the Lua script (``lua/lock.lua``) run by EVALSHA."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from ..base import owner_id
from .wire import Packer, connections_for

if TYPE_CHECKING:
    import redis

__all__ = [
    "PREFIX",
    "SCRIPT_LOAD",
    "Script",
    "grant_list",
    "owner_id",
    "script_source",
    "stored_key",
    "stored_keys",
]

PREFIX = "lockkit:{"


def script_source(name: str) -> str:
    """The text of ``lua/<name>.lua``."""
    # One name per joinpath(): Python 3.10's Traversable takes one.
    lua = resources.files("lockkit_core.backends.redis").joinpath("lua")
    return lua.joinpath(f"{name}.lua").read_text()


def stored_key(full_key: str) -> str:
    """The record's key; the braces put every key of this lock in one cluster hash slot."""
    return PREFIX + full_key + "}"


def stored_keys(lock_key: str) -> list[str]:
    """Record, fence counter, queue and queue entries of one lock, in the script's order."""
    return [lock_key, lock_key + ":f", lock_key + ":q", lock_key + ":e"]


def grant_list(lock_key: str, waiter_id: str) -> str:
    """The list a release pushes the grant of waiter ``waiter_id`` to (``lua/lock.lua``, G):
    in the lock's hash slot, like its other keys."""
    return lock_key + ":g:" + waiter_id


SCRIPT_LOAD = Packer(("SCRIPT", "LOAD"))


class Script:
    """A Lua script run by EVALSHA, loaded again if the server lost it (NOSCRIPT). Calls
    pass its ``numkeys`` keys, then its arguments, flat.

    Calls take the lock operations' own path (:mod:`.wire`): the command's head is packed
    once, and it goes out on a connection held for these calls, not through redis-py's
    per-command machinery. Failures raise redis-py's exception types all the same.
    ``give_back``: the client's pool is the app's (see :class:`.wire.Connections`).
    """

    def __init__(
        self, client: redis.Redis, name: str, numkeys: int, *, give_back: bool = False
    ) -> None:
        from redis.exceptions import NoScriptError

        self._noscript = NoScriptError
        #: the error a call raises (or a pipelined reply is) when the server lost the script
        self.noscript = NoScriptError
        self.source = script_source(name)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()  # noqa: S324 (Redis' id)
        self.numkeys = numkeys
        self._packer = Packer(("EVALSHA", self.sha, numkeys))
        self._connections = connections_for(client, give_back=give_back)

    def pack(self, *keys_and_args: Any) -> bytes:
        """The call, packed for the socket (to send with another command: see
        :meth:`.wire.Connections.call_pair`)."""
        return self._packer.pack(keys_and_args)

    def pack_text(self, keys_and_args: Sequence[str]) -> bytes:
        """:meth:`pack` for keys and arguments that are all ``str`` (see
        :meth:`.wire.Packer.pack_text`)."""
        return self._packer.pack_text(keys_and_args)

    def load(self) -> None:
        """Load the script into the server (after a NOSCRIPT answer)."""
        self._connections.call(SCRIPT_LOAD.pack((self.source,)))

    def __call__(self, *keys_and_args: Any) -> Any:
        return self.call_packed(self._packer.pack(keys_and_args))

    def call_packed(self, packed: bytes) -> Any:
        """Send a call :meth:`pack` made; its reply."""
        try:
            return self._connections.call(packed)
        except self._noscript:
            # The digest is the source's: loading it again gives the same one.
            self._connections.call(SCRIPT_LOAD.pack((self.source,)))
            return self._connections.call(packed)
