"""Test support shipped with lockkit: real servers, a fault-injecting proxy, the contract suite.

``servers`` and ``proxy`` need only the standard library; ``contract`` needs pytest.
"""

from .proxy import TcpProxy
from .servers import RedisServer, free_port, redis_ping
from .taskworkers import TaskWorkers

__all__ = ["RedisServer", "TaskWorkers", "TcpProxy", "free_port", "redis_ping"]
