"""The real OpenTelemetry SDK, set up once per test process (the API's global providers can
be set only once), with an in-memory metric reader and span exporter.

Readers keep cumulative sums, so each test looks only at the points of its own namespace."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class Otel:
    """What the SDK collected in this process."""

    reader: InMemoryMetricReader
    spans: InMemorySpanExporter

    def points(self, name: str, namespace: str) -> list[Any]:
        """The data points of metric ``name`` whose ``lockkit.namespace`` is ``namespace``."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data is not None else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != name:
                        continue
                    for point in metric.data.data_points:
                        if point.attributes.get("lockkit.namespace") == namespace:
                            found.append(point)
        return found

    def count(self, name: str, namespace: str, match: Mapping[str, str] | None = None) -> int:
        """The total count (histogram) or sum (counter) of ``name`` over the points whose
        attributes include ``match``."""
        total = 0
        for point in self.points(name, namespace):
            if all(point.attributes.get(k) == v for k, v in (match or {}).items()):
                total += point.count if hasattr(point, "count") else point.value
        return int(total)

    def acquire_spans(self, namespace: str) -> list[ReadableSpan]:
        return [
            span
            for span in self.spans.get_finished_spans()
            if span.name == "lockkit.acquire"
            and span.attributes is not None
            and span.attributes.get("lockkit.namespace") == namespace
        ]


@pytest.fixture(scope="session")
def otel() -> Iterator[Otel]:
    """The SDK, installed as the global providers of this test process (once: session)."""
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(tracer)
    yield Otel(reader, spans)
