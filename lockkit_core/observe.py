"""What lockkit tells the outside: OpenTelemetry metrics and spans, and structured log records.

Metrics (meter ``lockkit``, durations in seconds):

============================== ========= ==================================================
``lockkit.lock.wait.duration`` histogram from the acquire call to its outcome;
                                         ``lockkit.outcome`` = acquired | timeout | unavailable
``lockkit.lock.hold.duration`` histogram from the grant to its release or loss
``lockkit.lock.lost``          counter   leases lost while held
``lockkit.task.duplicates``    counter   duplicates of a task (Celery, django.tasks), with
                                         ``lockkit.reason``, ``lockkit.action``, ``lockkit.task``
============================== ========= ==================================================

Every one carries ``lockkit.backend`` (the URL scheme) and ``lockkit.namespace``; a lock made
with ``kit.lock(key, template=...)`` (the web guard's rules, the task adapters) adds
``lockkit.key_template``. The full key never becomes an attribute: one time series per key
would swamp the metrics store. Each store acquire is a ``lockkit.acquire`` span (with
``lockkit.outcome`` and ``lockkit.token``), a child of the caller's current span, so a slow
request shows where it waited.

Without ``opentelemetry-api`` (``pip install "lockkit[otel]"``) all of it is skipped at the
cost of one ``is None`` test; with the API but no SDK configured, the API's own no-op
objects answer (about a microsecond per acquire and release, see
``benchmarks/telemetry.py``). The instruments are made once, through the API's global
providers, so an SDK set up after lockkit was imported still receives everything.

Log records (logger ``lockkit`` and its children) of every path that is not the happy one
carry ``extra`` fields for structured handlers: ``lockkit_event`` (busy, timeout, lost,
unavailable, duplicate, ...), ``lockkit_key``, and ``lockkit_owner`` (an owner hint) and
``lockkit_task_id`` where they are known. Keys go into messages through ``%r``, so a key
holding a newline cannot forge a second log line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from .errors import BackendError

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.trace import Span, Tracer

try:
    from opentelemetry import metrics as _otel_metrics
    from opentelemetry import trace as _otel_trace
except ImportError:  # the otel extra is not installed: every hook is a no-op
    _otel_metrics = None  # type: ignore[assignment]
    _otel_trace = None  # type: ignore[assignment]

__all__ = [
    "ACQUIRE_SPAN",
    "OUTCOMES",
    "Labels",
    "Waiting",
    "duplicate",
    "event",
    "failed",
    "held",
    "lost",
    "refused",
    "waited",
    "waiting",
]

ACQUIRE_SPAN: Final = "lockkit.acquire"
#: the values of ``lockkit.outcome`` on ``lockkit.lock.wait.duration``
OUTCOMES: Final = ("acquired", "timeout", "unavailable")
#: seconds; from a non-blocking try (a millisecond) to a long wait on a busy key
_BUCKETS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class _Instruments:
    """The meter's instruments and the tracer, made once (see the module docstring)."""

    __slots__ = ("duplicates", "hold", "lost", "tracer", "wait")

    def __init__(self) -> None:
        assert _otel_metrics is not None and _otel_trace is not None
        meter = _otel_metrics.get_meter("lockkit")
        self.wait: Histogram = meter.create_histogram(
            "lockkit.lock.wait.duration",
            unit="s",
            description="Time from an acquire call to its outcome",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self.hold: Histogram = meter.create_histogram(
            "lockkit.lock.hold.duration",
            unit="s",
            description="Time from a grant to its release or loss",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self.lost: Counter = meter.create_counter(
            "lockkit.lock.lost", unit="{lock}", description="Leases lost while held"
        )
        self.duplicates: Counter = meter.create_counter(
            "lockkit.task.duplicates", unit="{task}", description="Duplicate task calls"
        )
        self.tracer: Tracer = _otel_trace.get_tracer("lockkit")


_instruments: _Instruments | None = None if _otel_metrics is None else _Instruments()


class Labels:
    """The attributes of one kit's (or one key template's) metrics, built once: the common
    ones and, for the wait histogram, one mapping per outcome (no dict built per call)."""

    __slots__ = ("_templated", "common", "outcome")

    def __init__(self, backend: str, namespace: str, template: str | None = None) -> None:
        common = {"lockkit.backend": backend, "lockkit.namespace": namespace}
        if template is not None:
            common["lockkit.key_template"] = template
        self.common: Mapping[str, str] = common
        self.outcome: Mapping[str, Mapping[str, str]] = {
            name: {**common, "lockkit.outcome": name} for name in OUTCOMES
        }
        self._templated: dict[str, Labels] = {}

    def with_template(self, template: str) -> Labels:
        """These labels with ``lockkit.key_template`` set to ``template`` (made once per
        template: a route or task locks on every call with the same one)."""
        found = self._templated.get(template)
        if found is None:
            found = Labels(
                self.common["lockkit.backend"], self.common["lockkit.namespace"], str(template)
            )
            # Templates are written in code, so few; a bound keeps a misuse (a template
            # built per call) from growing without end.
            if len(self._templated) < 1024:
                self._templated[template] = found
        return found


class Waiting:
    """One acquire being observed: when it began, and its span (None when spans go
    nowhere: with no tracer provider set the API hands out a non-recording one)."""

    __slots__ = ("instruments", "labels", "span", "started")

    def __init__(self, instruments: _Instruments, labels: Labels, span: Span | None) -> None:
        self.instruments = instruments
        self.labels = labels
        self.span = span
        self.started = time.monotonic()


def waiting(labels: Labels) -> Waiting | None:
    """An acquire starts (None without the otel extra: nothing to record)."""
    inst = _instruments
    if inst is None:
        return None
    span: Span | None = None
    # The API keeps the provider set by set_tracer_provider() in _TRACER_PROVIDER (None until
    # then), and its proxy tracer reads it on every span; reading it here skips a no-op span
    # (about a microsecond). Should the name ever go, every acquire starts its span again.
    if getattr(_otel_trace, "_TRACER_PROVIDER", True) is not None:
        span = inst.tracer.start_span(ACQUIRE_SPAN, attributes=labels.common)
        if not span.is_recording():
            span = None  # a no-op span: setting its attributes would only cost time
    return Waiting(inst, labels, span)


def waited(
    wait: Waiting | None, outcome: str, token: int | None = None, error: BaseException | None = None
) -> None:
    """The acquire ``wait`` ended with ``outcome`` (one of :data:`OUTCOMES`, or ``error`` for
    anything else, which ends the span only: a cancelled wait has no outcome to count)."""
    if wait is None:
        return
    counted = outcome in OUTCOMES
    if counted:
        wait.instruments.wait.record(time.monotonic() - wait.started, wait.labels.outcome[outcome])
    span = wait.span
    if span is None:
        return
    if counted:
        span.set_attribute("lockkit.outcome", outcome)
    if token is not None:
        span.set_attribute("lockkit.token", token)
    if error is not None:
        span.record_exception(error)
        span.set_status(_otel_trace.StatusCode.ERROR, type(error).__name__)
    span.end()


def refused(
    wait: Waiting | None, log: logging.Logger, full_key: str, timeout: float | None
) -> None:
    """An acquire of ``full_key`` found it held until ``timeout`` (0: one attempt)."""
    waited(wait, "timeout")
    if timeout:
        event(log, logging.INFO, "timeout", full_key, "lock %r still held after %gs", full_key,
              timeout)  # fmt: skip
    else:
        # A try that finds the key busy is routine (a poller, a guard): debug, not info.
        event(log, logging.DEBUG, "busy", full_key, "lock %r is held elsewhere", full_key)


def failed(wait: Waiting | None, log: logging.Logger, full_key: str, exc: BaseException) -> None:
    """An acquire of ``full_key`` raised ``exc``: a store failure is an ``unavailable``
    outcome (and a warning); anything else (cancelled, a bad ttl) only ends the span."""
    if isinstance(exc, BackendError):
        waited(wait, "unavailable", error=exc)
        event(log, logging.WARNING, "unavailable", full_key, "lock %r: the store failed: %s",
              full_key, exc)  # fmt: skip
    else:
        waited(wait, "", error=exc)


def held(labels: Labels, granted: float) -> None:
    """A hold granted at ``granted`` (monotonic) was released."""
    inst = _instruments
    if inst is not None:
        inst.hold.record(time.monotonic() - granted, labels.common)


def lost(labels: Labels, granted: float) -> None:
    """A hold granted at ``granted`` (monotonic) was lost: its hold ends, and it counts."""
    inst = _instruments
    if inst is not None:
        inst.hold.record(time.monotonic() - granted, labels.common)
        inst.lost.add(1, labels.common)


def duplicate(labels: Mapping[str, str], task: str, reason: str, action: str) -> None:
    """One duplicate of ``task``, found for ``reason`` and answered by ``action``."""
    inst = _instruments
    if inst is not None:
        attributes = {
            **labels,
            "lockkit.task": task,
            "lockkit.reason": reason,
            "lockkit.action": action,
        }
        inst.duplicates.add(1, attributes)


def event(
    log: logging.Logger,
    level: int,
    name: str,
    key: str,
    message: str,
    *args: Any,
    owner: str | None = None,
    task_id: str | None = None,
    exc_info: bool = False,
) -> None:
    """Log ``message % args`` with the structured fields of the module docstring. Put the
    key in the message as ``%r`` (never ``%s``): its repr escapes line breaks."""
    if log.isEnabledFor(level):
        fields = {
            "lockkit_event": name,
            "lockkit_key": key,
            "lockkit_owner": owner,
            "lockkit_task_id": task_id,
        }
        log.log(level, message, *args, extra=fields, exc_info=exc_info)
