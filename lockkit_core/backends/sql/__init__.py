"""Database stores: a lease table on PostgreSQL (``postgresql://``), MariaDB / MySQL
(``mysql://``) and SQLite (``sqlite://``).

Importing this package imports no driver: psycopg and PyMySQL are imported when a backend
that needs one is made (the registry first checks that it is installed).

**The table** (``lockkit_lease`` unless ``?table=`` says otherwise; created on first use, or
by ``lockkit migrate URL`` for a user that cannot run DDL, ``--sql`` prints it) has one row
per held key: the whole key, the SHA-1 of the owner token (never the token), the expiry,
the ttl, the fencing token, a holder hint (``host pid N``) and the start time. **Expiry is
decided by the database's clock** in the statement itself (``clock_timestamp()``,
``julianday('now')``): no client clock is ever compared with another.

**Acquiring** is one statement on PostgreSQL: insert the row, or take over a row whose
lease is over (or that is ours already: a retried request keeps its token), returning the
fence, or the holder's remaining lease when busy. **Releasing** and **extending** compare
the owner digest in the statement; a release also sends ``NOTIFY`` on the key's channel.

**Fences** come from a sequence (PostgreSQL) or a one-row counter (SQLite) that outlives
the rows: a freed key taken again gets a larger token, also after a server restart. On
PostgreSQL the fence is drawn under a transaction-scoped advisory lock on the key's hash, so
attempts on one key draw fences in the order they are granted.

**Waiting**: PostgreSQL ``LISTEN``/``NOTIFY`` per key, one waiter listening and the others
queued on the server (see :mod:`.pgwait`); ``fair=True`` is not supported (a first attempt
may take a freed key before the head waiter). MySQL and SQLite: bounded jittered backoff.

**Grade** ``single-node``: the lock is as safe as the one database server (a replica
promoted after an asynchronous failover may have lost recent grants; the fence sequence
then may also go back: use synchronous replication if that matters).
"""

from .mysql import MySQLBackend
from .postgres import PostgresBackend
from .schema import LeaseTable
from .sqlite import SqliteBackend

__all__ = ["LeaseTable", "MySQLBackend", "PostgresBackend", "SqliteBackend"]
