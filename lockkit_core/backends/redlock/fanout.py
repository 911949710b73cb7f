"""One request to every Redlock node at once, each answer awaited until one shared deadline.

Every node gets its command before any answer is read: the request goes out on each node's
connection in turn (a write to a socket buffer, microseconds), then the answers are read in
turn, each waited for only until ``sent + node_timeout``. So the whole round costs about the
slowest node's round trip, never their sum, and a node that does not answer (stopped, paused,
cut off) costs ``node_timeout`` once, without threads. The commands are the redis backend's
own script calls (``EVALSHA`` of ``lua/lock.lua``), packed by its :class:`~..redis.wire.Packer`.

A connection whose answer did not come in time is disconnected, so that answer can never be
read as the reply to a later command. Opening a connection (after a failure, or the first
time) is not overlapped: a node that accepts no connection costs up to its
``socket_connect_timeout`` before the next node's request goes out.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, BackendUnavailable
from ..redis.scripts import Script
from ..redis.wire import Packer

if TYPE_CHECKING:
    from ..redis import RedisBackend

__all__ = ["Fanout", "Reply"]


@dataclass(frozen=True)
class Reply:
    """One node's answer: the script's ``value``, or the ``error`` that stood in its way."""

    value: Any = None
    error: BackendError | None = None


class _NoAnswer(TimeoutError):
    """The node did not answer before the round's deadline."""


class Fanout:
    """Sends the lock script to every node of ``nodes`` in one round (see the module doc)."""

    def __init__(self, nodes: Sequence[RedisBackend], node_timeout: float) -> None:
        from redis import exceptions

        self._nodes = list(nodes)
        self.node_timeout = node_timeout
        self._noscript = exceptions.NoScriptError
        self._response_error = exceptions.ResponseError
        self._failures = (exceptions.RedisError, OSError, TimeoutError)
        # per number of keys: the script on each node (its digest, and the reload on
        # NOSCRIPT) and the packed head of its EVALSHA
        self._scripts: dict[int, list[Script]] = {}
        self._packers: dict[int, Packer] = {}

    def _script(self, numkeys: int) -> tuple[list[Script], Packer]:
        scripts = self._scripts.get(numkeys)
        if scripts is None:
            scripts = [Script(node.client, "lock", numkeys) for node in self._nodes]
            self._scripts[numkeys] = scripts
            self._packers[numkeys] = Packer(("EVALSHA", scripts[0].sha, numkeys))
        return scripts, self._packers[numkeys]

    def _checkout(self, node: RedisBackend) -> Any:
        pool = node.client.connection_pool
        try:
            return pool.get_connection()
        except TypeError:  # redis-py before 5.3 wants a command name
            return pool.get_connection("EVALSHA")  # type: ignore[call-arg,unused-ignore]

    def call(self, what: str, numkeys: int, args: Sequence[Sequence[Any] | None]) -> list[Reply]:
        """Run the script with ``args[i]`` (its keys, then its arguments) on node ``i``, all
        at once; node ``i`` is skipped (an empty :class:`Reply`) where ``args[i]`` is None.
        Never raises for a node's failure: each is in its reply, for the caller to count."""
        scripts, packer = self._script(numkeys)
        replies = [Reply() for _ in self._nodes]
        sent: list[tuple[int, Any]] = []
        deadline = time.monotonic() + self.node_timeout
        for i, node in enumerate(self._nodes):
            request = args[i]
            if request is None:
                continue
            conn = None
            try:
                conn = self._checkout(node)
                conn.send_packed_command((packer.pack(request),), check_health=False)
                sent.append((i, conn))
            except self._failures as exc:
                replies[i] = Reply(error=node.failure(what, exc, may_retry=False))
                if conn is not None:
                    conn.disconnect()
                    node.client.connection_pool.release(conn)
        for i, conn in sent:
            node = self._nodes[i]
            try:
                if not conn.can_read(timeout=max(0.0, deadline - time.monotonic())):
                    raise _NoAnswer
                replies[i] = Reply(conn.read_response())
            except self._noscript:
                # the node restarted and lost its scripts: load it there and ask again
                replies[i] = self._again(what, node, scripts[i], args[i])
            except self._response_error as exc:
                replies[i] = Reply(error=node.failure(what, exc, may_retry=False))
            except _NoAnswer:
                conn.disconnect()  # the answer may still come; it must never be read as another's
                replies[i] = Reply(
                    error=BackendUnavailable(
                        f"redis at {node.describe()} did not answer within the node timeout "
                        f"({self.node_timeout:g} s) to {what}"
                    )
                )
            except BaseException as exc:
                conn.disconnect()  # as above
                if not isinstance(exc, self._failures):
                    raise
                replies[i] = Reply(error=node.failure(what, exc, may_retry=False))
            finally:
                node.client.connection_pool.release(conn)
        return replies

    def _again(
        self, what: str, node: RedisBackend, script: Script, args: Sequence[Any] | None
    ) -> Reply:
        assert args is not None
        try:
            return Reply(script(*args))
        except self._failures as exc:
            return Reply(error=node.failure(what, exc, may_retry=False))
