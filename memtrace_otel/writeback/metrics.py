"""Attribution outcomes as OTel metrics, for the processor and ``memtrace serve``.

Three instruments on the meter ``memtrace_otel.writeback`` (names, units and descriptions in
:class:`~memtrace_otel.semconv.MemTraceMetric`):

* ``memtrace.attribution.failures`` (counter, ``{failure}``): failed answers attributed, by
  ``memtrace.error_type``, the blamed operation's name (``memtrace.root_cause.operation.name``)
  and its ``service.name``; ``none`` / ``unknown`` when no operation could be blamed;
* ``memtrace.attribution.duration`` (histogram, ``s``): time spent attributing one failure
  (gathering its traces, the graph, the engine, writing the verdict), by error type;
* ``memtrace.attribution.dropped`` (counter, ``{failure}``): failures not attributed, by
  ``memtrace.drop.reason``.

Every point also carries ``memtrace.attribution.source`` (``processor`` or ``serve``). Attribute
values are names and types only, never ids, so the series stay few. The processor records through
the application's ``MeterProvider`` (the global one by default: a no-op until the application sets
one); ``serve`` through its own, exporting by OTLP (``--metrics-otlp``).
"""

from __future__ import annotations

from typing import Any

import networkx as nx
from opentelemetry import metrics
from opentelemetry.metrics import MeterProvider

from memtrace_otel.attribution import Attribution
from memtrace_otel.semconv import WRITEBACK_SCOPE, MemTraceMetric, MemTraceMetricAttribute
from memtrace_otel.version import __version__

__all__ = ["DROP_REASONS", "AttributionMetrics"]

_M, _A = MemTraceMetric, MemTraceMetricAttribute
DROP_REASONS = ("queue_full", "shutdown", "evicted", "over_budget", "error")
"""Values of ``memtrace.drop.reason``."""
# Seconds: attribution takes milliseconds in process and up to the per-failure budget (30 s) in serve.
_BOUNDARIES = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _limited(value: Any, default: str) -> str:
    """A point attribute value: a plain string, bounded (an operation name is application data)."""
    return str(value)[:128] if value else default


class AttributionMetrics:
    """The instruments, created once per processor or service; thread-safe (the SDK's instruments are).

    >>> from opentelemetry.sdk.metrics import MeterProvider
    >>> from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    >>> reader = InMemoryMetricReader()
    >>> m = AttributionMetrics(MeterProvider(metric_readers=[reader]), source="processor")
    >>> m.dropped("queue_full", 2)
    >>> [p.value for r in reader.get_metrics_data().resource_metrics for s in r.scope_metrics
    ...  for metric in s.metrics for p in metric.data.data_points]
    [2]
    """

    def __init__(self, meter_provider: MeterProvider | None = None, *, source: str) -> None:
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(WRITEBACK_SCOPE, __version__)
        self.source = source
        self._failures = meter.create_counter(_M.FAILURES, _M.FAILURES_UNIT, _M.FAILURES_DESCRIPTION)
        self._duration = meter.create_histogram(_M.DURATION, _M.DURATION_UNIT, _M.DURATION_DESCRIPTION,
                                                explicit_bucket_boundaries_advisory=_BOUNDARIES)
        self._dropped = meter.create_counter(_M.DROPPED, _M.DROPPED_UNIT, _M.DROPPED_DESCRIPTION)

    def attributed(self, G: nx.DiGraph, verdict: Attribution, seconds: float) -> None:
        """One failure attributed (or judged and not attributable), in ``seconds``."""
        error_type = verdict.error_type.value if verdict.error_type is not None else "none"
        service = G.nodes[verdict.operation].get("service") if verdict.operation in G else None
        self._failures.add(1, {_A.ERROR_TYPE: error_type,
                               _A.OPERATION_NAME: _limited(verdict.operation_name, "none"),
                               _A.SERVICE_NAME: _limited(service, "unknown"), _A.SOURCE: self.source})
        self._duration.record(max(0.0, seconds), {_A.ERROR_TYPE: error_type, _A.SOURCE: self.source})

    def dropped(self, reason: str, amount: int = 1) -> None:
        """``amount`` failures not attributed, for ``reason`` (one of :data:`DROP_REASONS`)."""
        if amount > 0:
            self._dropped.add(amount, {_A.REASON: reason, _A.SOURCE: self.source})
