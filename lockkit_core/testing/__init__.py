"""Test support shipped with lockkit: real servers, a fault-injecting proxy, the contract suite.

``servers``, ``postgres``, ``mariadb``, ``zookeeper``, ``webservers`` (gunicorn, uvicorn) and
``proxy`` need only the standard library; ``contract`` needs pytest.
"""

from .mariadb import MariaDBServer
from .postgres import PostgresServer
from .proxy import TcpProxy
from .servers import RedisServer, free_port, redis_ping
from .taskworkers import TaskWorkers
from .webservers import Gunicorn, Uvicorn, http_call, raw_http
from .zookeeper import ZooKeeperEnsemble, ZooKeeperServer

__all__ = [
    "Gunicorn",
    "MariaDBServer",
    "PostgresServer",
    "RedisServer",
    "TaskWorkers",
    "TcpProxy",
    "Uvicorn",
    "ZooKeeperEnsemble",
    "ZooKeeperServer",
    "free_port",
    "http_call",
    "raw_http",
    "redis_ping",
]
