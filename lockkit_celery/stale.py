"""Clearing the locks a killed worker left behind, when its successor starts on the same host.

A worker killed as a whole (SIGKILL, the OOM killer, a lost container) leaves each running
task's the ``run`` record lock and, where the worker took it itself, its ``<key>`` lock. They free
themselves within the task's ``ttl``; until then the broker's redelivered copy is deferred. With
``app.conf.lockkit_clear_stale_on_start = True`` a worker that becomes ready frees them at once.

A lock is cleared only when all of these hold, and each one cleared is logged with its key:

* its holder (``"<hostname> pid <pid>"``, written when it was taken) is this host, and that pid
  is not a live process here (a pid reused since reads as alive: the lock is left to its lease);
* it is the run record of a task id (held only while a copy runs, with a lease no longer than the
  longest ``ttl`` of the app's locked tasks), or the ``<key>`` / the ``id`` record of
  such a task id (finished records are never cleared: they drop late copies);
* its lease has more than a second left (so it cannot pass to a new holder while we look).

``<key>`` locks of tasks that are only queued are never cleared, whoever took them: the worker
adopts them when the task runs. The default is off, because "host and pid" identifies a process
only where the hostname names one pid namespace: containers that share a hostname (``docker run
--hostname``, ``network_mode: host``) and share a lock store must leave it off.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import worker_ready

from lockkit_core import ConfigError, LockError, LockKit
from lockkit_core.admin import LockInfo
from lockkit_core.dedupe import RECORD_PREFIX, derived_task_id, id_prefix, run_key

from .settings import kit_for, resolve
from .task import LockedTask

__all__ = ["clear_stale_locks"]

log = logging.getLogger("lockkit.celery")

#: The app setting that turns the startup clearing on.
SETTING = "lockkit_clear_stale_on_start"

_MARGIN = 1.0
_RUN = run_key("")


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a process here that has not exited (a zombie has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: kill(0) is all we know
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def dead_local_holder(holder: str | None, host: str) -> bool:
    """True if ``holder`` (``"<hostname> pid <pid>"``) names a process of ``host`` that is gone."""
    if not holder:
        return False
    name, sep, pid = holder.rpartition(" pid ")
    if not sep or name != host or not pid.isdigit():
        return False
    return not pid_alive(int(pid))


def _longest_ttl(app: Celery) -> float:
    ttls = [resolve(t).ttl for t in app.tasks.values() if isinstance(t, LockedTask)]
    return max(ttls, default=kit_for(app).config.ttl)


def _task_ids(kit: LockKit, infos: Iterable[LockInfo]) -> dict[str, list[LockInfo]]:
    """The ``<key>`` and id-record locks held, by the task id they stand for."""
    infos = list(infos)
    keys = {info.key: info for info in infos if not info.key.startswith(RECORD_PREFIX)}
    records = {info.key: info for info in infos if info.key.startswith(RECORD_PREFIX)}
    found: dict[str, list[LockInfo]] = {}
    for key, info in keys.items():
        prefix = id_prefix(key)
        named = [(k[len(prefix) :], i) for k, i in records.items() if k.startswith(prefix)]
        for chosen, record in named:  # a caller-chosen task id holds ``key``
            found.setdefault(chosen, []).extend([info, record])
        derived = derived_task_id(kit, key, info.token)
        if not named and derived is not None:
            found.setdefault(derived, []).append(info)
    return found


def clear_stale_locks(app: Celery, host: str | None = None) -> list[str]:
    """Free the locks of ``app`` left by dead processes of this host (module docstring); the
    keys freed, each logged."""
    kit = kit_for(app)
    host = socket.gethostname() if host is None else host
    longest = _longest_ttl(app)
    infos = kit.admin.list("")

    def clearable(info: LockInfo) -> bool:
        left = info.ttl_remaining
        return left is not None and left > _MARGIN and dead_local_holder(info.holder, host)

    stale_runs = {
        info.key[len(_RUN) :]: info
        for info in infos
        if info.key.startswith(_RUN)
        and info.ttl_remaining is not None
        and info.ttl_remaining <= longest
        and clearable(info)
    }
    by_task = _task_ids(kit, infos)
    cleared: list[str] = []
    for task_id, run in stale_runs.items():
        for info in [run, *(i for i in by_task.get(task_id, []) if clearable(i))]:
            try:
                # Read again: the grant listed must still be the one held, with time to spare.
                now = kit.admin.info(info.key)
                if now is None or now.token != info.token or not clearable(now):
                    continue
                if kit.admin.force_release(info.key):
                    cleared.append(info.key)
                    log.warning(
                        "lockkit: cleared %s of task %s, left by %s, a process that is gone",
                        info.key, task_id, info.holder,
                    )  # fmt: skip
            except LockError as exc:
                log.warning("lockkit: could not clear %r: %s", info.key, exc)
    return cleared


def clear_on_start_enabled(app: Celery) -> bool:
    """The ``lockkit_clear_stale_on_start`` setting (off by default)."""
    value = app.conf.get(SETTING, False)
    if not isinstance(value, bool):
        raise ConfigError(f"app.conf.{SETTING} must be True or False, got {value!r}")
    return value


def _clear_on_worker_ready(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    if app is None or SETTING not in app.conf:
        return
    try:
        if clear_on_start_enabled(app):
            clear_stale_locks(app)
    except Exception:  # a cleanup must never stop a worker; the leases still run out
        log.exception("lockkit: clearing stale locks at startup failed")


worker_ready.connect(_clear_on_worker_ready, weak=False)
