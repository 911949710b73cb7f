"""``lockkit doctor URL``: checks a live store for what makes it unsafe or slow for locks,
and says what to change. One module per store family:

- :mod:`.redis`: ``redis://`` (eviction policy, persistence against the fencing promise,
  replicas and failover, cluster mode, round trip and server clock against the ttl) and
  ``redlock://`` (the same on each node, and whether a majority answers);
- :mod:`.consensus`: ZooKeeper's session timeout against the ttl; etcd's leader, members,
  alarms, and a password sent without TLS;
- :mod:`.sql`: PostgreSQL's and MySQL's isolation level and a pooler in between.

Each check gives a :class:`Finding` (``ok``, ``warn`` or ``unsafe``, a message and a fix);
a :class:`Report` gathers them and exits 1 when anything is unsafe. Django's
``check --deploy`` and the Celery worker's start-up call :func:`diagnose` too.
"""

from .findings import Finding, Level, Report
from .run import diagnose

__all__ = ["Finding", "Level", "Report", "diagnose"]
