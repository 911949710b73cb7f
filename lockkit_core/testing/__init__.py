"""Test support shipped with lockkit: real servers, a fault-injecting proxy, the contract suite.

``servers``, ``postgres`` and ``proxy`` need only the standard library; ``contract`` needs
pytest.
"""

from .postgres import PostgresServer
from .proxy import TcpProxy
from .servers import RedisServer, free_port, redis_ping
from .taskworkers import TaskWorkers

__all__ = ["PostgresServer", "RedisServer", "TaskWorkers", "TcpProxy", "free_port", "redis_ping"]
