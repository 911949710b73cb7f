"""The idle connections a database pool keeps for reuse: :class:`IdleConnections`, which the
PostgreSQL and MariaDB pools (``PgPool``, ``MyPool``) share."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

__all__ = ["INHERITED", "IdleConnections"]

C = TypeVar("C")

#: connections inherited across a fork: never used, never closed (closing would end the
#: parent's session, whose socket the child shares), only kept referenced
INHERITED: list[object] = []


class IdleConnections(Generic[C]):
    """Up to ``max_idle`` idle connections, shared by a backend's threads; a subclass says how
    a connection is thrown away (:meth:`discard`)."""

    def __init__(self, max_idle: int) -> None:
        self.max_idle = max_idle
        self._idle: list[C] = []
        self._lock = threading.Lock()
        self._closed = False

    def discard(self, conn: C) -> None:
        """Close ``conn`` for good."""
        raise NotImplementedError

    def _pop_idle(self) -> C | None:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def _keep(self, conn: C) -> bool:
        """Keep ``conn`` for reuse if the pool is open and not full; False: the caller
        discards it."""
        with self._lock:
            if not self._closed and len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return True
        return False

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's connections without closing them (see
        :data:`INHERITED`)."""
        with self._lock:
            INHERITED.extend(self._idle)
            self._idle.clear()

    def close(self) -> None:
        """Close every idle connection; connections given back later are closed too."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            self.discard(conn)
