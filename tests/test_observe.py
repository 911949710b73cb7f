"""OpenTelemetry metrics and spans of the core Lock, read back from the real SDK's in-memory
reader and exporter (tests/otel_fixtures.py)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest
from otel_fixtures import Otel

from lockkit_core import LockKit
from lockkit_core.errors import BackendUnavailable, LockLost
from lockkit_core.testing import free_port

WAIT = "lockkit.lock.wait.duration"
HOLD = "lockkit.lock.hold.duration"
LOST = "lockkit.lock.lost"


def _kit(**options: object) -> LockKit:
    return LockKit(f"memory://otel-{uuid.uuid4().hex[:10]}", namespace=_ns(), **options)  # type: ignore[arg-type]


def _ns() -> str:
    return f"otel{uuid.uuid4().hex[:10]}"


def test_acquire_and_release_record_wait_hold_and_a_span(otel: Otel) -> None:
    with _kit() as kit:
        ns = kit.namespace
        with kit.lock("order:42", timeout=1) as held:
            token = held.token
            time.sleep(0.06)
        assert otel.count(WAIT, ns, {"lockkit.outcome": "acquired"}) == 1
        [hold] = otel.points(HOLD, ns)
        assert hold.count == 1 and hold.sum >= 0.05
        assert dict(hold.attributes) == {"lockkit.backend": "memory", "lockkit.namespace": ns}
        [span] = otel.acquire_spans(ns)
        assert span.attributes is not None
        assert span.attributes["lockkit.outcome"] == "acquired"
        assert span.attributes["lockkit.token"] == token
        assert span.attributes["lockkit.backend"] == "memory"


def test_the_full_key_is_never_an_attribute(otel: Otel) -> None:
    with _kit() as kit:
        with kit.lock("order:4242", template="order:{order_id}"):
            pass
        ns = kit.namespace
        points = otel.points(WAIT, ns) + otel.points(HOLD, ns)
        assert points
        for point in points:
            assert point.attributes["lockkit.key_template"] == "order:{order_id}"
            assert "4242" not in repr(dict(point.attributes))
        for span in otel.acquire_spans(ns):
            assert "4242" not in repr(dict(span.attributes or {}))


def test_busy_and_timed_out_acquires_count_as_timeout(otel: Otel) -> None:
    with _kit() as kit:
        ns = kit.namespace
        with kit.lock("busy"):
            other = kit.lock("busy", reentrant=False)
            assert other.acquire(blocking=False) is False
            started = time.monotonic()
            assert other.acquire(timeout=0.2) is False
            assert time.monotonic() - started >= 0.2
        assert otel.count(WAIT, ns, {"lockkit.outcome": "timeout"}) == 2
        [point] = [p for p in otel.points(WAIT, ns) if p.attributes["lockkit.outcome"] == "timeout"]
        assert point.max >= 0.2  # the timed-out wait is measured to its end
        outcomes = [s.attributes["lockkit.outcome"] for s in otel.acquire_spans(ns) if s.attributes]
        assert sorted(outcomes) == ["acquired", "timeout", "timeout"]


def test_an_unreachable_store_counts_as_unavailable(otel: Otel) -> None:
    ns = _ns()
    url = f"redis://127.0.0.1:{free_port()}/0"
    with (
        LockKit(url, namespace=ns, options={"socket_timeout": 0.2}) as kit,
        pytest.raises(BackendUnavailable),
    ):
        kit.lock("k").acquire(timeout=0.3)
    assert otel.count(WAIT, ns, {"lockkit.outcome": "unavailable", "lockkit.backend": "redis"}) == 1
    [span] = otel.acquire_spans(ns)
    assert span.status.status_code.name == "ERROR"


def test_a_lost_lease_counts_and_ends_the_hold(
    otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    with _kit(ttl=0.2, auto_renew=False) as kit:
        ns = kit.namespace
        lock = kit.lock("job")
        assert lock.acquire()
        hint = lock.owner_hint
        time.sleep(0.3)
        with caplog.at_level(logging.WARNING, logger="lockkit"), pytest.raises(LockLost):
            lock.release()
        assert otel.count(LOST, ns) == 1
        assert otel.count(HOLD, ns) == 1
        [record] = [r for r in caplog.records if getattr(r, "lockkit_event", None) == "lost"]
        assert record.lockkit_key == f"{ns}:job"  # type: ignore[attr-defined]
        assert record.lockkit_owner == hint  # type: ignore[attr-defined]


def test_the_asyncio_path_records_the_same(otel: Otel) -> None:
    async def main(kit: LockKit) -> None:
        async with kit.lock("a", timeout=1):
            assert await kit.lock("a", reentrant=False).aacquire(timeout=0.05) is False

    with _kit() as kit:
        asyncio.run(main(kit))
        ns = kit.namespace
        assert otel.count(WAIT, ns, {"lockkit.outcome": "acquired"}) == 1
        assert otel.count(WAIT, ns, {"lockkit.outcome": "timeout"}) == 1
        assert otel.count(HOLD, ns) == 1


def test_locked_decorator_labels_its_template(otel: Otel) -> None:
    with _kit() as kit:

        @kit.locked("report:{day}")
        def build(day: str) -> str:
            return day

        assert build("2026-11-25") == "2026-11-25"
        [point] = otel.points(HOLD, kit.namespace)
        assert point.attributes["lockkit.key_template"] == "report:{day}"


def test_locks_of_one_template_share_one_set_of_attributes() -> None:
    # The web guard and the task adapters make a lock per request or task run: the
    # attribute mappings of its metrics are built once per template, not once per lock.
    from lockkit_core import observe

    with _kit() as kit:
        first = kit.lock("order:1", template="order:{order_id}")
        second = kit.lock("order:2", template="order:{order_id}")
        assert first.labels is second.labels
        other = kit.lock("seat:1", template="seat:{seat}").labels
        assert other is not first.labels
        assert other.common["lockkit.key_template"] == "seat:{seat}"
        # Templates come from code, but one made from user input must not grow the cache
        # without end: past the bound each lock builds its own again.
        for n in range(observe.TEMPLATES_KEPT + 10):
            labels = kit.lock(f"k:{n}", template=f"k:{n}").labels
            assert labels.outcome["timeout"]["lockkit.key_template"] == f"k:{n}"
        assert kit.lock("order:3", template="order:{order_id}").labels is first.labels
        late = f"k:{observe.TEMPLATES_KEPT + 5}"
        assert kit.lock("x", template=late).labels is not kit.lock("y", template=late).labels


def test_the_acquire_span_is_a_child_of_the_caller_s_span(otel: Otel) -> None:
    from opentelemetry import trace

    with _kit() as kit:
        tracer = trace.get_tracer("app")
        with tracer.start_as_current_span("POST /orders") as request, kit.lock("o"):
            pass
        [span] = otel.acquire_spans(kit.namespace)
        assert span.parent is not None
        assert span.parent.span_id == request.get_span_context().span_id


def test_the_grafana_dashboard_queries_only_series_lockkit_exports() -> None:
    import json
    import re
    from pathlib import Path

    from lockkit_core import observe

    exported = set()
    assert observe._instruments is not None
    for name, suffixes in (
        ("lockkit.lock.wait.duration", ("_seconds_bucket", "_seconds_count", "_seconds_sum")),
        ("lockkit.lock.hold.duration", ("_seconds_bucket", "_seconds_count", "_seconds_sum")),
        ("lockkit.lock.lost", ("_total",)),
        ("lockkit.task.duplicates", ("_total",)),
    ):
        exported |= {name.replace(".", "_") + suffix for suffix in suffixes}
    path = Path(__file__).parent.parent / "docs" / "guides" / "lockkit-grafana-dashboard.json"
    dashboard = json.loads(path.read_text())
    queried = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            queried |= set(re.findall(r"\blockkit_[a-z_]+", target["expr"]))
    labels = {"lockkit_namespace", "lockkit_key_template", "lockkit_outcome", "lockkit_task"}
    labels |= {"lockkit_action"}
    assert queried - labels, "the dashboard queries nothing"
    assert queried - labels <= exported, queried - labels - exported


def test_the_api_global_read_before_each_span_is_still_there() -> None:
    # Until an app sets a tracer provider, observe reads the API's global instead of calling
    # get_tracer_provider(), which looks in os.environ each time (1.7 µs per acquire). Were
    # the name gone, spans would still be right, only that much slower: say so here.
    from opentelemetry import trace

    assert hasattr(trace, "_TRACER_PROVIDER")


_LATE_SDK = """
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from lockkit_core import LockKit

kit = LockKit("memory://late", namespace="late", auto_renew=False)
with kit.lock("k"):  # before the app set anything up: nothing to record to
    pass
reader, spans = InMemoryMetricReader(), InMemorySpanExporter()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
tracer = {tracer}
trace.set_tracer_provider(tracer)
with kit.lock("k"):
    pass
[metric] = [
    metric
    for scope in reader.get_metrics_data().resource_metrics[0].scope_metrics
    for metric in scope.metrics
    if metric.name == "lockkit.lock.wait.duration"
]
[point] = metric.data.data_points
print(point.count, [dict(span.attributes) for span in spans.get_finished_spans()])
"""


@pytest.mark.parametrize(
    ("tracer", "spans"),
    [
        ("TracerProvider(); tracer.add_span_processor(SimpleSpanProcessor(spans))", 1),
        ("trace.NoOpTracerProvider()", 0),
    ],
    ids=["sdk", "no-op"],
)
def test_an_sdk_set_up_after_the_first_acquire_receives_the_next(tracer: str, spans: int) -> None:
    import ast
    import subprocess
    import sys

    script = _LATE_SDK.replace("{tracer}", tracer)
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    count, attributes = done.stdout.split(" ", 1)
    assert int(count) == 1  # the acquire after set-up, not the one before
    expected = {
        "lockkit.backend": "memory",
        "lockkit.namespace": "late",
        "lockkit.outcome": "acquired",
        "lockkit.token": 2,
    }
    assert ast.literal_eval(attributes) == [expected] * spans


def test_without_opentelemetry_installed_locks_work_and_record_nothing() -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if the otel extra were not installed\n"
        "from lockkit_core import LockKit, observe\n"
        "assert observe._instruments is None\n"
        "kit = LockKit('memory://absent', auto_renew=False)\n"
        "with kit.lock('k', timeout=1):\n"
        "    assert kit.lock('k', reentrant=False).acquire(blocking=False) is False\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
