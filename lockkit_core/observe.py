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
cost of one ``is None`` test; with the API but no provider set (no SDK configured), at the
cost of two reads of the API's globals (see :func:`_unset`). The instruments are made once,
through the API's global providers, so an SDK set up after lockkit was imported still
receives everything from then on.

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
    "TEMPLATES_KEPT",
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
#: the most key templates a kit keeps the attributes of (see Labels.with_template)
TEMPLATES_KEPT: Final = 256
_BUCKETS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class _Instruments:
    """The meter's instruments, made once (see the module docstring)."""

    __slots__ = ("duplicates", "hold", "lost", "wait")

    def __init__(self) -> None:
        assert _otel_metrics is not None
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


_instruments: _Instruments | None = None if _otel_metrics is None else _Instruments()
#: the module holding the API's global meter provider (None if it moved: see _unset)
_metrics_globals = getattr(_otel_metrics, "_internal", None)


def _unset() -> bool:
    """True while the app has set neither a meter nor a tracer provider (nor named one in
    the environment, which the API loads when lockkit makes its instruments): every record
    would go to the API's proxies, which drop it, so none is made. The API's globals are
    read directly, as its public getters cost more than the records they would spare;
    should their names go, this says False and the proxies answer as before."""
    return (
        getattr(_metrics_globals, "_METER_PROVIDER", True) is None
        and getattr(_otel_trace, "_TRACER_PROVIDER", True) is None
    )


class _Spans:
    """Where ``lockkit.acquire`` spans go: decided once the app has set a tracer provider
    (the API takes one only once), then the provider's own tracer, with no proxy between."""

    __slots__ = ("decided", "tracer")

    def __init__(self) -> None:
        self.decided = False
        self.tracer: Tracer | None = None

    def decide(self) -> Tracer | None:
        """The tracer to start spans with, or None while they would go nowhere."""
        provider = _otel_trace.get_tracer_provider()
        if isinstance(provider, _otel_trace.ProxyTracerProvider):
            return None  # none set yet (reached only if the API's global has gone, see waiting)
        if not isinstance(provider, _otel_trace.NoOpTracerProvider):
            self.tracer = provider.get_tracer("lockkit")
        self.decided = True
        return self.tracer


_spans = _Spans()


class Labels:
    """The attributes of one kit's (or one key template's) metrics, built once: the common
    ones and, for the wait histogram, one mapping per outcome (no dict built per call; the
    SDK still copies, cleans and hashes them on every record)."""

    __slots__ = ("_templates", "common", "outcome")

    def __init__(self, backend: str, namespace: str, template: str | None = None) -> None:
        common = {"lockkit.backend": backend, "lockkit.namespace": namespace}
        if template is not None:
            common["lockkit.key_template"] = template
        self.common: Mapping[str, str] = common
        self.outcome: Mapping[str, Mapping[str, str]] = {
            name: {**common, "lockkit.outcome": name} for name in OUTCOMES
        }
        self._templates: dict[str, Labels] = {}

    def with_template(self, template: str) -> Labels:
        """These labels with ``lockkit.key_template`` set to ``template``; the same object
        for the same template (the web guard and the task adapters make a lock per call)."""
        labels = self._templates.get(template)
        if labels is None:
            labels = Labels(
                self.common["lockkit.backend"], self.common["lockkit.namespace"], str(template)
            )
            # Templates come from code, so there are few; a cache that filled up (templates
            # made from input by mistake) stops growing, and those locks build their own.
            if len(self._templates) < TEMPLATES_KEPT:
                self._templates[template] = labels
        return labels


class Waiting:
    """One acquire being observed: when it began, and its span (None when spans go
    nowhere: no tracer provider set, or the sampler dropped it)."""

    __slots__ = ("instruments", "labels", "span", "started")

    def __init__(self, instruments: _Instruments, labels: Labels, span: Span | None) -> None:
        self.instruments = instruments
        self.labels = labels
        self.span = span
        self.started = time.monotonic()


def waiting(labels: Labels) -> Waiting | None:
    """An acquire starts (None without the otel extra: nothing to record)."""
    inst = _instruments
    if inst is None or _unset():
        return None
    span: Span | None = None
    spans = _spans
    if spans.decided:
        tracer = spans.tracer
    elif getattr(_otel_trace, "_TRACER_PROVIDER", True) is None:
        # No provider set yet. The public get_tracer_provider() would look one up in
        # os.environ on every call until then (1.7 µs, more than the no-op span it would
        # spare), so the API's global is read; should the name go, decide() answers (slower).
        tracer = None
    else:
        tracer = spans.decide()
    if tracer is not None:
        # Not made current: nothing runs inside it, and attaching a context costs time.
        span = tracer.start_span(ACQUIRE_SPAN, attributes=labels.common)
        if not span.is_recording():
            span = None  # sampled out: setting its attributes would only cost time
    return Waiting(inst, labels, span)


def waited(
    wait: Waiting | None, outcome: str, token: int | None = None, error: BaseException | None = None
) -> None:
    """The acquire ``wait`` ended with ``outcome`` (one of :data:`OUTCOMES`, or ``error`` for
    anything else, which ends the span only: a cancelled wait has no outcome to count)."""
    if wait is None:
        return
    attributes = wait.labels.outcome.get(outcome)
    if attributes is not None:
        wait.instruments.wait.record(time.monotonic() - wait.started, attributes)
    span = wait.span
    if span is None:
        return
    if attributes is not None:
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
    if inst is not None and not _unset():
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
