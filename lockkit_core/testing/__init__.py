"""Test support shipped with lockkit: real servers, a fault-injecting proxy, the contract suite.

``servers``, ``zookeeper`` and ``proxy`` need only the standard library; ``contract`` needs
pytest.
"""

from .proxy import TcpProxy
from .servers import RedisServer, free_port, redis_ping
from .zookeeper import ZooKeeperEnsemble, ZooKeeperServer

__all__ = [
    "RedisServer",
    "TcpProxy",
    "ZooKeeperEnsemble",
    "ZooKeeperServer",
    "free_port",
    "redis_ping",
]
