"""``RedlockNodes``: N independent throwaway redis-servers, the nodes of one ``redlock://`` URL."""

from __future__ import annotations

from .process import Closing
from .servers import RedisServer

__all__ = ["RedlockNodes"]


class RedlockNodes(Closing):
    """``count`` :class:`RedisServer` instances on free loopback ports, unrelated to each
    other (no replication), as Redlock wants its masters. ``nodes[i].kill()``,
    ``.pause()``/``.resume()`` and ``.restart()`` fail one node at a time."""

    def __init__(self, count: int = 3) -> None:
        self.nodes: list[RedisServer] = []
        try:
            for _ in range(count):
                self.nodes.append(RedisServer())
        except BaseException:
            self.close()
            raise

    def url(self, query: str = "") -> str:
        """``redlock://127.0.0.1:P1,127.0.0.1:P2,.../0`` (plus ``?query`` if given)."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"redlock://{hosts}/0" + (f"?{query}" if query else "")

    def heal(self) -> None:
        """Every node running and answering again (resumed, or started afresh)."""
        for node in self.nodes:
            node.resume()
            if not node.running():
                node.restart()  # on its own port, so the URL stays right

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __repr__(self) -> str:
        return f"<RedlockNodes {self.url()}>"
