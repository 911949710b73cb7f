"""``postgresql://...?mode=advisory``: PostgreSQL advisory locks, for the django-pglock audience.

No table, no writes: a lock is ``pg_try_advisory_lock`` on a 64-bit digest of the key, held
by a connection kept for it until the release. Their honest limits, declared in the
capabilities (``lockkit backends``):

- **no ttl**: the lock lasts as long as the session that took it, so ``kit.lock()`` needs
  ``ttl=None``. A holder that hangs (stopped, deadlocked) keeps it; one whose process or
  connection dies frees it when the server notices the session is gone.
- **session-bound, no hand-off**: the lock cannot pass to another process (Celery, django.tasks
  dedupe need the lease table: leave out ``mode=advisory``). A session that ends while held
  (server restart, ``pg_terminate_backend``) is reported to the holder: ``on_lost``,
  ``LockLost`` (see :mod:`.pgsessions`).
- **no fencing token, no listing**: the server knows a 64-bit number, not the key. Two keys
  whose digests collide (about 1 in 2**32 for 2**16 keys in use) exclude each other:
  a spurious wait, never two holders.

``scope=session`` (default) holds a session lock on an idle connection; ``scope=transaction``
holds ``pg_advisory_xact_lock`` inside a transaction left open until the release (``COMMIT``).
Only the latter is safe behind a pooler in transaction mode (PgBouncer
``pool_mode=transaction``), which runs each transaction on whichever server connection is
free: a session lock would be taken on one server session and released on another, leaking
it. Session scope therefore checks, once per backend, that its connections keep their server
session, and refuses with a ``ConfigError`` naming the fix when they do not.

Waiting is in the server: a waiter blocks in ``pg_advisory_lock`` (queued by PostgreSQL,
bounded by ``lock_timeout``) and the grant arrives on its own connection, which then holds.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import psycopg
from psycopg import errors as pg_errors

from ...errors import BackendError, BackendUnavailable, ConfigError, NotSupported
from ...url import LockURL
from ..base import Backend, Capability, Grade, Grant, Lease, Waiter
from .pgpool import IDLE, BoundedConnection, PgPool, translate, translated
from .pgsessions import HeldSessions
from .pgwait import STATEMENT_MARGIN_MS
from .postgres import postgres_conninfo
from .schema import SERVER_OPTIONS

__all__ = ["PgAdvisoryBackend", "advisory_id"]

SCOPES = ("session", "transaction")
#: what :meth:`PgAdvisoryBackend._on_lock` does: an index into the statements below
TAKE, RELEASE = 0, 1
VERBS = ("acquire", "release")
FUNCTIONS = (b"pg_try_advisory_lock", b"pg_advisory_unlock")
#: session scope: a connection's first statement prepares both (their names), then runs one
PREPARE_SQL = (
    b"PREPARE %s(bigint) AS SELECT pg_try_advisory_lock($1); "
    b"PREPARE %s(bigint) AS SELECT pg_advisory_unlock($1); SELECT %s(%d)"
)
#: transaction scope: the lock lives in a transaction opened by the take, ended by the release
XACT_TAKE_SQL = b"BEGIN; SELECT pg_try_advisory_xact_lock(%d)"
XACT_RELEASE_SQL = b"COMMIT; SELECT true"
BINARY = [1]
#: a true ``boolean``, in text (the simple protocol) and binary (prepared statements)
TRUE = (b"t", b"\x01")
#: the answers of :meth:`PgAdvisoryBackend.try_acquire` (a Grant is immutable)
GRANTED, BUSY = Grant(True, None), Grant(False)
_inherited: list[BoundedConnection] = []


@functools.lru_cache(maxsize=4096)  # a digest per statement was a fiftieth of a cycle
def advisory_id(key: str) -> int:
    """The advisory lock id of ``key``: the first 64 bits of its SHA-256, signed."""
    data = b"lockkit-advisory\0" + key.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big", signed=True)


class PgAdvisoryBackend(Backend):
    """Advisory locks on one PostgreSQL server; see the module docstring."""

    schemes: ClassVar[tuple[str, ...]] = ("postgresql", "postgres")
    extra: ClassVar[str | None] = "postgresql"
    requires: ClassVar[str | None] = "psycopg"
    capabilities: ClassVar[Capability] = (
        Capability.NO_LEASE | Capability.NOTIFY | Capability.CROSS_PROCESS | Capability.CROSS_HOST
    )
    grade: ClassVar[Grade] = Grade.SINGLE_NODE
    option_types: ClassVar[Mapping[str, type]] = {
        **SERVER_OPTIONS,
        "sslmode": str,
        "mode": str,
        "scope": str,
    }

    def __init__(self, url: LockURL, options: Mapping[str, Any]) -> None:
        super().__init__(url, options)
        self.check_seconds("connect_timeout", "socket_timeout")
        if self.options.get("mode") != "advisory":
            raise ConfigError(f"{url.redacted()}: PgAdvisoryBackend serves ?mode=advisory only")
        self.scope = self.options.get("scope", "session")
        if self.scope not in SCOPES:
            raise ConfigError(
                f"option 'scope' of {url.redacted()} must be 'session' or 'transaction', "
                f"got {self.scope!r}"
            )
        io_timeout = self.options.get("socket_timeout", 10.0)
        # transaction scope is meant to work behind a transaction pooler, which runs the next
        # statement on another server session, where a prepared one is unknown; session
        # scope refuses such a pooler (``_check_pinned``), so it may prepare its statements
        self._pool = PgPool(
            postgres_conninfo(url, self.options),
            url.redacted(),
            io_timeout,
            prepare=self.scope == "session",
        )
        self._sessions = HeldSessions(url.redacted())
        self._pinned_checked = False
        self._check_lock = threading.Lock()

    # -- statements ------------------------------------------------------------------------------

    def _ask(self, conn: BoundedConnection, sql: bytes, what: str) -> bytes | None:
        """Run ``sql`` (one or more statements, no parameters: the simple protocol, one round
        trip) on ``conn``: the first column of the last statement's first row, as text."""
        with translated(what, self._pool.where):
            conn.pgconn.send_query(sql)
            return conn.answer().get_value(0, 0)

    def _on_lock(self, conn: BoundedConnection, which: int, key: str) -> bool:
        """Take (``which``: :data:`TAKE`, without waiting) or release (:data:`RELEASE`)
        ``key``'s lock on ``conn`` in one round trip; True if it was taken or freed.

        Session scope runs statements prepared on the connection (its connections keep their
        server session, checked by :meth:`_check_pinned`), with the lock id as a binary
        parameter, straight through libpq: the server parses and plans nothing per call, and
        the client adapts and builds nothing. They are prepared, with unique names, by the
        connection's first statement in the same round trip. Transaction scope sends its
        counterparts in the lock's transaction: a pooler runs the next statement on another
        server session, where nothing prepared exists."""
        lock_id = advisory_id(key)
        pgconn = conn.pgconn
        try:
            names = conn.prepared_names
            if self.scope == "transaction":
                pgconn.send_query(XACT_TAKE_SQL % lock_id if which == TAKE else XACT_RELEASE_SQL)
            elif names:
                pgconn.send_query_prepared(
                    names[which], [lock_id.to_bytes(8, "big", signed=True)], BINARY, 1
                )
            else:
                # a server session may outlive our connection (a session-mode pooler without
                # a reset query hands it to the next client): names of our own never collide
                tag = secrets.token_hex(8).encode()
                names = (b"lockkit_take_" + tag, b"lockkit_release_" + tag)
                pgconn.send_query(PREPARE_SQL % (*names, FUNCTIONS[which], lock_id))
            value = conn.answer().get_value(0, 0)
            conn.prepared_names = names
        except psycopg.Error as exc:  # not translated(): a context manager per call shows here
            raise translate(exc, f"{VERBS[which]} {key!r}", self._pool.where) from exc
        return value in TRUE

    def _check_pinned(self) -> None:
        """Refuse session scope when server sessions are not tied to our connections (a
        pooler in transaction or statement mode): ask two connections for their server
        process, in turn. Directly on PostgreSQL (or a session-mode pooler) the first keeps
        its own and the second has another; a transaction pooler hands the second the server
        session the first just used, or moves the first to another."""
        if self.scope != "session" or self._pinned_checked:
            return
        with self._check_lock:
            if self._pinned_checked:
                return
            first, _ = self._pool.take("check that sessions stay on their connection")
            second, _ = self._pool.take("check that sessions stay on their connection")
            try:
                what = "read the server process id"
                pids = [
                    int(self._ask(conn, b"SELECT pg_backend_pid()", what) or 0)
                    for conn in (first, second, first)
                ]
            finally:
                self._pool.give(first)
                self._pool.give(second)
            if pids[0] == pids[1] or pids[0] != pids[2]:
                raise ConfigError(
                    f"{self._pool.where} does not keep a server session per connection (server "
                    f"processes {pids[0]}, {pids[1]}, {pids[2]} for two connections asked in "
                    "turn): a pooler in transaction or statement mode, e.g. PgBouncer with "
                    "pool_mode=transaction, would take a session advisory lock on one server "
                    "session and release it on another, leaking it. Use "
                    "?mode=advisory&scope=transaction (the lock lives in a transaction the "
                    "pooler keeps on one session), connect to PostgreSQL directly or through "
                    "a session-mode pool, or leave out mode=advisory (the lease table works "
                    "through any pooler)"
                )
            self._pinned_checked = True

    def _give_back(self, conn: BoundedConnection) -> None:
        """Return ``conn`` to the pool once nothing of a lock is left on it."""
        if conn.pgconn.transaction_status != IDLE:  # an aborted or open transaction: end it
            try:
                with translated("end a transaction", self._pool.where):
                    conn.execute("ROLLBACK")
            except BackendUnavailable:
                conn.close()
        self._pool.give(conn)

    # -- locking ---------------------------------------------------------------------------------

    def try_acquire(self, key: str, owner: str, ttl: float) -> Grant:
        if self._sessions.get(key, owner) is not None:
            return GRANTED  # a retried request: the session holds it already
        self._check_pinned()
        conn, _ = self._pool.take(f"acquire {key!r}")
        try:
            taken = self._on_lock(conn, TAKE, key)
        except BaseException:
            conn.close()
            raise
        if taken:
            self._sessions.add(key, owner, conn)
            return GRANTED
        self._give_back(conn)
        return BUSY

    def release(self, key: str, owner: str) -> bool:
        session = self._sessions.get(key, owner)
        if session is None:
            return False
        with session.busy:
            if self._sessions.pop(key, owner) is not session:
                return False  # its session ended meanwhile (the watcher dropped it)
            if session.lost is not None or session.conn.closed:
                return False
            try:
                freed = self._on_lock(session.conn, RELEASE, key)
            except BackendUnavailable:
                session.conn.close()  # the session ended, and the lock with it
                return False
            except BaseException:
                session.conn.close()  # what is left on it is unknown: ending it frees the lock
                raise
            self._give_back(session.conn)
        return freed

    def extend(self, key: str, owner: str, ttl: float) -> bool:
        raise NotSupported(
            f"{self.url.redacted()} (advisory locks) has no lease to extend: a lock lasts as "
            "long as the session that took it"
        )

    def adopt(self, key: str, owner: str, ttl: float) -> Grant:
        raise NotSupported(
            f"{self.url.redacted()} (advisory locks) cannot adopt a lock: it belongs to the "
            "session that took it; leave out mode=advisory for locks that pass between "
            "processes"
        )

    def track(self, hold: Any) -> None:
        self._sessions.track(hold)

    def waiter(self, key: str, owner: str, fair: bool) -> Waiter:
        return AdvisoryWaiter(self, key, owner)

    def wait_in_server(self, key: str, owner: str, timeout: float) -> bool:
        """Block in the server's queue for ``key`` for up to ``timeout`` seconds; True if the
        lock was granted (a connection now holds it for ``owner``)."""
        self._check_pinned()
        lock_id = advisory_id(key)
        wait_ms = max(1, int(timeout * 1000))
        limits = f"lock_timeout = {wait_ms:d}"
        if self.scope == "session":
            sql = (
                f"SET statement_timeout = {wait_ms + STATEMENT_MARGIN_MS:d}; SET {limits}; "
                f"SELECT pg_advisory_lock({lock_id:d}); "
                "RESET lock_timeout; RESET statement_timeout; SELECT true"
            ).encode()
        else:
            sql = (
                f"BEGIN; SET LOCAL statement_timeout = {wait_ms + STATEMENT_MARGIN_MS:d}; "
                f"SET LOCAL {limits}; SELECT pg_advisory_xact_lock({lock_id:d}); "
                "SET LOCAL lock_timeout = 0; SET LOCAL statement_timeout = 0; SELECT true"
            ).encode()
        conn, _ = self._pool.take(f"wait for {key!r}")
        conn.io_timeout = self._pool.io_timeout + wait_ms / 1000  # the server answers late
        try:
            try:
                self._ask(conn, sql, f"wait for {key!r}")
            finally:
                conn.io_timeout = self._pool.io_timeout
        except BackendError as exc:
            if isinstance(exc.__cause__, pg_errors.LockNotAvailable):
                self._give_back(conn)  # still held by another when lock_timeout came
                return False
            conn.close()
            raise
        except BaseException:
            conn.close()
            raise
        self._sessions.add(key, owner, conn)
        return True

    # -- admin -----------------------------------------------------------------------------------

    _HOLDER_SQL = (
        "SELECT l.pid, a.client_addr, a.application_name FROM pg_locks l "
        "JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.classid = %(high)s AND l.objid = %(low)s "
        "AND l.objsubid = 1 AND l.granted AND l.database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database())"
    )

    def _holder(self, key: str) -> tuple[Any, ...] | None:
        unsigned = advisory_id(key) & 0xFFFFFFFFFFFFFFFF
        params = {"high": unsigned >> 32, "low": unsigned & 0xFFFFFFFF}
        rows = self._pool.run(self._HOLDER_SQL, params, f"read the lock {key!r}")
        return rows[0] if rows else None

    def list(self, prefix: str) -> list[Lease]:
        raise NotSupported(
            f"{self.url.redacted()} (advisory locks) cannot list locks: the server keeps a "
            "64-bit number per lock, not its key; ask for one key with info"
        )

    def info(self, key: str) -> Lease | None:
        found = self._holder(key)
        if found is None:
            return None
        pid, addr, app = found
        return Lease(
            key=key, owner_hint="", token=None, ttl_remaining=None,
            holder=f"{app or 'session'} from {addr or 'local socket'}, server pid {pid}",
        )  # fmt: skip

    def force_release(self, key: str) -> bool:
        """End the holding session (``pg_terminate_backend``): its holder hears LockLost."""
        found = self._holder(key)
        if found is None:
            return False
        rows = self._pool.run(
            "SELECT pg_terminate_backend(%(pid)s)", {"pid": found[0]}, f"force-release {key!r}"
        )
        return bool(rows and rows[0][0])

    # -- lifecycle -------------------------------------------------------------------------------

    def after_fork_in_child(self) -> None:
        self._pool.forget_after_fork()
        _inherited.extend(self._sessions.forget_after_fork())

    def close(self) -> None:
        self._sessions.close()
        self._pool.close()

    def describe(self) -> str:
        return f"{self.url.redacted()} (advisory locks, {self.scope} scope)"


class AdvisoryWaiter(Waiter):
    """Waits in the server's lock queue; a grant arrives on the waiter's own connection."""

    def __init__(self, backend: PgAdvisoryBackend, key: str, owner: str) -> None:
        self._backend = backend
        self._key = key
        self._owner = owner
        self._granted = False

    def wait(self, timeout: float) -> Grant | None:
        started = time.monotonic()
        if self._backend.wait_in_server(self._key, self._owner, timeout):
            self._granted = True
            return Grant(True, None, since=started)
        return None

    def close(self, acquired: bool, *, reachable: bool = True) -> None:
        if self._granted and not acquired:
            self._backend.release(self._key, self._owner)  # handed to us after we gave up
