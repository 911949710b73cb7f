"""What task deduplication keeps in the lock store, and :class:`TaskRecords`, its own API on it.

Every record is a lease in the kit's namespace, so it expires by itself and shows up in the
admin listings (``lockkit list``, ``celery lockkit list``):

==========================================  ==============================  ====================
key                                         held                            by
==========================================  ==============================  ====================
``<key>``                                   from enqueue until the task     the call, then the
                                            ends                            worker
``task-record:id:<digest>:<task id>``       with ``<key>``, when the task   the same (its owner
                                            id is not the one derived from  derived from
                                            its token                       ``<key>``'s owner)
``task-record:run:<task id>``               while one copy of the task id   the worker, renewed
                                            runs                            every ttl/3
``task-record:finished:<task id>``          ``remember`` seconds after the  nobody (a marker)
                                            task id ended, whatever its
                                            outcome
``task-record:done:<digest>``               ``once`` seconds after a        nobody (a marker)
                                            success
``task-record:done:<digest>:<task id>``     the same, naming the task that  nobody (a marker)
                                            did it
==========================================  ==============================  ====================

``<digest>`` is the SHA-256 of ``<key>`` (32 hex digits), and a call's key may not start with
``task-record:`` (:func:`check_call_key`), so no key a task argument renders can reach
another call's records (``order_id="42:done"`` is the key ``sms:42:done``, never the done
marker of ``sms:42``), and the records of two keys never share a prefix.

"Finished" is a record of its own, written before ``<key>`` and ``run:<task id>`` are freed,
so a late copy of the task id (a broker redelivery) reads it whatever the leases say.

The task id of a call that took ``<key>`` is derived from the key and its fencing token, so a
duplicate finds it with one read and the common path writes nothing more. A caller-chosen
id (``task_id=``, canvas, a queue that picks its own ids) is written as
its ``id`` record, found by listing the key's record prefix (stores with ``LIST``).

:class:`TaskRecords` reads and writes these through the store's own operations (one round
trip each), not through ``kit.admin``, the operators' API.
"""

from __future__ import annotations

import hashlib
import uuid

from ..backends.base import Capability, Lease
from ..errors import ConfigError
from ..keys import check_key, namespaced
from ..kit import LockKit, LockMaker
from ..lock import new_owner_token

__all__ = [
    "RECORD_PREFIX",
    "TaskRecords",
    "check_call_key",
    "derived_owner",
    "derived_task_id",
    "done_key",
    "finished_key",
    "id_key",
    "id_prefix",
    "run_key",
]


#: the UUID namespace of the derived task ids (RFC 4122's URL namespace)
_URL_NAMESPACE = uuid.NAMESPACE_URL.bytes

#: what every record's name starts with; a call's key may not
RECORD_PREFIX = "task-record:"


def check_call_key(key: str) -> str:
    """Return ``key`` if a call may lock it: not one of the records' names."""
    check_key(key)
    if key.startswith(RECORD_PREFIX):
        raise ConfigError(
            f"task lock key {key!r} starts with {RECORD_PREFIX!r}, which is kept for the "
            "records of task deduplication; change the key template"
        )
    return key


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def id_prefix(key: str) -> str:
    """What the names of ``key``'s id records start with."""
    return f"{RECORD_PREFIX}id:{_digest(key)}:"


def derived_task_id(kit: LockKit, key: str, token: int | None) -> str | None:
    """The task id of the grant ``token`` of ``key`` on this store (None without a token).

    It depends on the namespace, key and token only, never on how the store's URL is spelled,
    so producers that name one server differently agree on it."""
    if token is None:
        return None
    name = f"lockkit|{kit.namespace}|{key}|{token}"
    # str(uuid.uuid5(uuid.NAMESPACE_URL, name)), spelled out: it runs for every task on the
    # producer and on the worker, and the UUID object costs more than the hash.
    digest = bytearray(hashlib.sha1(_URL_NAMESPACE + name.encode()).digest()[:16])  # noqa: S324
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def derived_owner(owner: str, task_id: str) -> str:
    """The owner token of ``<key>:id:<task id>``, derived from ``<key>``'s owner: whoever
    holds the call's key (the producer, then the worker that adopted it) holds its id record
    too, with nothing more to hand over."""
    return hashlib.sha256(f"{owner}|id|{task_id}".encode()).hexdigest()[:32]


def id_key(key: str, task_id: str) -> str:
    """The record naming a caller-chosen task id that holds ``key``."""
    return id_prefix(key) + task_id


def run_key(task_id: str) -> str:
    """Held while one copy of ``task_id`` runs."""
    return f"{RECORD_PREFIX}run:{task_id}"


def finished_key(task_id: str) -> str:
    """Kept ``remember`` seconds after ``task_id`` ended."""
    return f"{RECORD_PREFIX}finished:{task_id}"


def done_key(key: str, task_id: str | None = None) -> str:
    """The ``once`` marker of ``key`` (and, with ``task_id``, the one naming the task)."""
    done = f"{RECORD_PREFIX}done:{_digest(key)}"
    return done if task_id is None else f"{done}:{task_id}"


class TaskRecords:
    """The records of one kit's tasks; every method is one store operation (listing one).

    The store must let a lease pass between processes (``HAND_OFF``: the producer takes a
    call's key, the worker adopts it); ``setting`` names where the user chose the store."""

    def __init__(self, kit: LockKit, setting: str = "the lock store URL") -> None:
        backend = kit.backend
        if Capability.HAND_OFF not in backend.capabilities:
            raise ConfigError(
                f"{backend.describe()} cannot hand a lease on to another process (its leases "
                "end with the client session that took them), and task deduplication passes "
                f"the enqueue lock to the worker that runs the task; set {setting} to a store "
                "that can, such as redis:// (or file:// when every process runs on one host)"
            )
        self.kit = kit
        self.backend = backend
        self.namespace = kit.namespace
        self.listable = Capability.LIST in backend.capabilities
        #: lock_maker by (ttl, template), for the kit's config of the first key
        self._makers: tuple[object, dict[tuple[float, str | None], LockMaker]] = (None, {})

    def lock_maker(self, ttl: float, template: str | None = None) -> LockMaker:
        """``make(key, owner=None)``: ``kit.lock(key, owner=owner, ttl=ttl, auto_renew=True,
        reentrant=False, template=template)``, its options checked once per ``ttl`` and
        ``template`` rather than for every lock of every task."""
        config, makers = self._makers
        if config is not self.kit.config:
            config, makers = self._makers = (self.kit.config, {})
        make = makers.get((ttl, template))
        if make is None:
            if len(makers) >= 256:  # many ttls or task names: keep it bounded
                makers.clear()
            make = makers[ttl, template] = self.kit.lock_maker(
                ttl=ttl, auto_renew=True, reentrant=False, template=template
            )
        return make

    def _stored(self, key: str) -> str:
        return namespaced(self.namespace, check_key(key))

    def lease(self, key: str) -> Lease | None:
        """The lease on ``key``, or None if it is free."""
        return self.backend.info(self._stored(key))

    def take(self, key: str, owner: str, ttl: float) -> int | bool | None:
        """Take ``key`` for ``owner`` (or renew it if ``owner`` holds it) for ``ttl`` seconds,
        not renewed; its fencing token (None on a store without), or False if held."""
        grant = self.backend.try_acquire(self._stored(key), owner, ttl)
        return grant.token if grant.acquired else False

    def give_back(self, key: str, owner: str) -> bool:
        """Free ``key`` if ``owner`` holds it."""
        return self.backend.release(self._stored(key), owner)

    def put_marker(self, key: str, ttl: float) -> bool:
        """Hold ``key`` for ``ttl`` seconds under an owner nobody keeps; False if held."""
        return self.take(key, new_owner_token(), ttl) is not False

    def marker(self, key: str, ttl: float) -> tuple[str, str, float]:
        """``(stored key, owner nobody keeps, ttl)``: :meth:`put_marker`'s operation, for a
        batch (``Backend.end_run``)."""
        return self._stored(key), new_owner_token(), ttl

    def finished(self, task_id: str) -> bool:
        """True if ``task_id`` ended within its ``remember`` window."""
        return self.lease(finished_key(task_id)) is not None

    def mark_finished(self, task_id: str, remember: float) -> None:
        """Record that ``task_id`` ended, for ``remember`` seconds."""
        self.put_marker(finished_key(task_id), remember)

    def lost(self, task_id: str, key: str) -> bool:
        """True if the task ``task_id``, which held ``key``, neither runs, nor holds ``key``,
        nor finished within its ``remember`` window: a duplicate waiting on it will never see
        its result unless it runs itself. (A task that succeeded frees ``<key>`` and ``run``
        with its finished record written, before its result is stored.)"""
        return (
            self.lease(run_key(task_id)) is None
            and self.lease(key) is None
            and not self.finished(task_id)
        )

    def done(self, key: str) -> bool:
        """True if a success of ``key`` is within its ``once`` window."""
        return self.lease(done_key(key)) is not None

    def done_task_id(self, key: str) -> str | None:
        """The id of the task whose success the ``once`` marker of ``key`` records."""
        return self._listed_id(done_key(key) + ":")

    def task_id(
        self, key: str, *, derived: bool = True, besides: str | None = None
    ) -> tuple[str | None, float | None]:
        """The id of the task that holds ``key`` now and the seconds its lease has left
        ((None, None) if free, or if with ``derived=False`` no id record names it yet);
        ``besides`` is the caller's own task id, whose record does not count."""
        if self.listable:
            prefix = id_prefix(key)
            stored = self._stored(prefix)
            for record in reversed(self.backend.list(stored)):
                named = record.key[len(stored) :]
                if named != besides:
                    return named, record.ttl_remaining
        if not derived:
            return None, None
        lease = self.lease(key)
        if lease is None:
            return None, None
        return derived_task_id(self.kit, key, lease.token), lease.ttl_remaining

    def _listed(self, prefix: str) -> Lease | None:
        if not self.listable:
            return None
        leases = self.backend.list(self._stored(prefix))
        return leases[-1] if leases else None

    def _listed_id(self, prefix: str) -> str | None:
        lease = self._listed(prefix)
        return None if lease is None else lease.key.rpartition(prefix)[2]
