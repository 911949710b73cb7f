"""What task deduplication keeps in the lock store, and how a task id is found from a key.

Every record is a lease in the kit's namespace, so it expires by itself and shows up in the
admin listings (``lockkit list``, ``celery lockkit list``):

========================  ======================================  ============================
key                       held                                    by
========================  ======================================  ============================
``<key>``                 from enqueue until the task ends        the call, then the worker
``<key>:id:<task id>``    with ``<key>``, when the task id is     the same
                          not the one derived from its token
``run:<task id>``         while one copy of the task id runs,     the worker, renewed every
                          then ``remember`` seconds after it      ttl/3; then nobody
                          ended
``<key>:done``            ``once`` seconds after a success        nobody (a marker)
``<key>:done:<task id>``  the same, naming the task that did it   nobody (a marker)
========================  ======================================  ============================

A ``run:<task id>`` lease longer than the task's ``ttl`` can only be the one kept after the
task ended (a running copy renews it to ``ttl``), so one read tells a late copy whether the
first copy still runs (defer) or finished (drop), and a run costs no separate marker.

The task id of a call that took ``<key>`` is derived from the key and its fencing token, so a
duplicate finds it with one read and the common path writes nothing more. A caller-chosen
id (``task_id=``, canvas, a store without fencing tokens) is written as ``<key>:id:<task id>``,
found by listing the key's prefix.
"""

from __future__ import annotations

import uuid

from ..kit import LockKit

__all__ = [
    "derived_task_id",
    "done_key",
    "find_done_task_id",
    "find_task_id",
    "finished",
    "id_key",
    "put_marker",
    "run_key",
]


def derived_task_id(kit: LockKit, key: str, token: int | None) -> str | None:
    """The task id of the grant ``token`` of ``key`` on this store (None without a token).

    It depends on the namespace, key and token only, never on how the store's URL is spelled,
    so producers that name one server differently agree on it."""
    if token is None:
        return None
    name = f"lockkit|{kit.namespace}|{key}|{token}"
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def id_key(key: str, task_id: str) -> str:
    """The record naming a caller-chosen task id that holds ``key``."""
    return f"{key}:id:{task_id}"


def run_key(task_id: str) -> str:
    """Held while one copy of ``task_id`` runs."""
    return f"run:{task_id}"


def finished(kit: LockKit, task_id: str, ttl: float) -> bool:
    """True if ``task_id`` ended (its run lock is kept longer than a running copy's ``ttl``)."""
    info = kit.admin.info(run_key(task_id))
    return info is not None and info.ttl_remaining is not None and info.ttl_remaining > ttl


def done_key(key: str, task_id: str | None = None) -> str:
    """The ``once`` marker of ``key`` (and, with ``task_id``, the one naming the task)."""
    return f"{key}:done" if task_id is None else f"{key}:done:{task_id}"


def _listed_id(kit: LockKit, prefix: str) -> str | None:
    infos = kit.admin.list(prefix)
    return infos[-1].key[len(prefix) :] if infos else None


def find_task_id(kit: LockKit, key: str, *, derived: bool = True) -> str | None:
    """The id of the task that holds ``key`` now, or None if it is free (or, with
    ``derived=False``, if no :func:`id_key` record names it yet)."""
    named = _listed_id(kit, f"{key}:id:")
    if named is not None or not derived:
        return named
    info = kit.admin.info(key)
    return None if info is None else derived_task_id(kit, key, info.token)


def find_done_task_id(kit: LockKit, key: str) -> str | None:
    """The id of the task whose success the ``once`` marker of ``key`` records."""
    return _listed_id(kit, done_key(key) + ":")


def put_marker(kit: LockKit, key: str, ttl: float) -> bool:
    """Hold ``key`` for ``ttl`` seconds, never renewed nor released; False if already held."""
    return kit.lock(key, ttl=ttl, auto_renew=False, reentrant=False).acquire(
        blocking=False, timeout=0
    )
