"""``lockkit doctor`` at worker start-up: the store's settings checked once per worker.

``app.conf.lockkit_doctor`` says what to do with the findings (``worker_init``):

- ``"log"`` (the default): each warning and unsafe finding is logged, the worker starts;
- ``"refuse"``: logged, and a store found unsafe stops the worker before it takes a task
  (an evicting Redis would grant a held lock twice);
- ``"off"``: not checked (no round trips at start-up).

A store that cannot be reached is only logged, whatever the setting: the worker's tasks
report it themselves, and a broker outage must not be turned into a crash loop.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from celery import Celery
from celery.signals import worker_init

from lockkit_core import ConfigError
from lockkit_core.doctor import Level, Report, diagnose

from .settings import store_config
from .startup import uses_lockkit

__all__ = ["DOCTOR_MODES", "doctor_app", "doctor_mode"]

log = logging.getLogger("lockkit.celery")

DOCTOR_MODES: Final = ("log", "refuse", "off")
#: the findings that say the store (or a majority of its nodes) cannot be reached
_OUTAGES: Final = frozenset({"reachable", "quorum"})


def doctor_mode(app: Celery) -> str:
    """``app.conf.lockkit_doctor``, checked: one of :data:`DOCTOR_MODES`."""
    mode = app.conf.get("lockkit_doctor", "log")
    if mode not in DOCTOR_MODES:
        raise ConfigError(
            f"app.conf.lockkit_doctor must be one of {', '.join(DOCTOR_MODES)}, got {mode!r}"
        )
    return str(mode)


def doctor_app(app: Celery) -> Report | None:
    """The doctor's report on ``app``'s lock store, logged finding by finding; None when the
    app does not use lockkit or ``lockkit_doctor`` is ``"off"``. With ``"refuse"``, a
    store found unsafe raises ``SystemExit`` (from ``worker_init``, that stops the worker:
    Celery's signal dispatch catches only ``Exception``)."""
    if not uses_lockkit(app) or doctor_mode(app) == "off":
        return None
    config = store_config(app)
    report = diagnose(config.url, config.options, ttl=config.ttl)
    for finding in report.findings:
        if finding.level is Level.OK:
            continue
        where = f" ({finding.where})" if finding.where else ""
        log.warning(
            "lockkit doctor: %s %s%s: %s; fix: %s",
            finding.level,
            finding.check,
            where,
            finding.message,
            finding.fix or "-",
        )
    # only settings refuse: an outage is the tasks' to report (see the module docstring)
    unsafe = [f for f in report.findings if f.level is Level.UNSAFE and f.check not in _OUTAGES]
    if unsafe and doctor_mode(app) == "refuse":
        log.critical(
            "lockkit doctor: the lock store %s is unsafe for locks; the worker will not start "
            "(app.conf.lockkit_doctor = 'refuse')",
            report.url,
        )
        raise SystemExit(1)
    return report


def _doctor_on_worker_init(sender: Any = None, **_: Any) -> None:
    app = getattr(sender, "app", None)
    if app is None:
        return
    try:
        doctor_app(app)
    except SystemExit:
        raise
    except Exception:  # checking must never stop a worker unless told to refuse
        log.exception("lockkit doctor failed at worker start-up")


worker_init.connect(_doctor_on_worker_init, weak=False)
