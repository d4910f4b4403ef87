"""The attribution service behind ``memtrace serve``: settled traces in, annotation spans out.

Data flow, one box per module::

    OTLP receivers (grpc_receiver, http_receiver)
        -> TraceAssembler (assembler: group by trace, wait until it settles, bounded)
        -> settle thread: traces holding a failed evaluation become jobs (a bounded BatchWorker)
        -> attribution worker: attribution/runner.analyze, the library pipeline: the trace + the
           linked traces it lacks + the traces that used the same memory stores (spans/gather:
           fetched and searched through the backend's query API) -> graph -> engine
           -> annotation spans (writeback/annotations.annotate)
        -> OutboxSpanProcessor (outbox: OTLP to the backend, retried until accepted)

Each instance holds only the traces routed to it (the Collector's
``load_balancing`` exporter shards by trace id). Memory written in another
trace, possibly routed to another instance, is fetched from the trace backend
that already stores every span; instances share nothing.

Thread safety: :meth:`AttributionService.ingest` may be called from any number
of receiver threads; the assembler has its own lock, the job queue (a
:class:`~memtrace_otel.batch_worker.BatchWorker`, one attribution thread) one more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import networkx as nx
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Tracer

from memtrace_otel.attribution import create_engine
from memtrace_otel.attribution.base import Attribution
from memtrace_otel.attribution.runner import analyze
from memtrace_otel.batch_worker import BatchWorker
from memtrace_otel.collector.assembler import AssembledTrace, TraceAssembler
from memtrace_otel.collector.outbox import OutboxSpanProcessor
from memtrace_otel.graph.build import ContentLookup
from memtrace_otel.semconv import MemTrace
from memtrace_otel.spans.backend import TraceBackend
from memtrace_otel.spans.gather import Gathered
from memtrace_otel.spans.linked import LinkedFetch
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.spans.store_scope import DEFAULT_LOOKBACK_SECONDS
from memtrace_otel.version import __version__

__all__ = ["AttributionService", "ServiceStats"]

_logger = logging.getLogger(__name__)
Annotate = Callable[[Tracer, nx.DiGraph, Attribution, bool], None]


@dataclass(slots=True)
class ServiceStats:
    """Counters, for the stop summary and the tests. Thread-safe: :meth:`add` takes a lock
    (receiver threads, the settle thread and the worker all count)."""

    spans_received: int = 0
    spans_refused: int = 0
    traces_settled: int = 0
    traces_failed: int = 0
    jobs_dropped: int = 0
    attributions: int = 0
    attribution_errors: int = 0
    linked_fetched: int = 0
    linked_missing: int = 0
    store_fetched: int = 0
    store_searches_limited: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        """Add to the named counters, atomically."""
        with self._lock:
            for name, count in counts.items():
                setattr(self, name, getattr(self, name) + count)


def _has_failed_evaluation(trace: AssembledTrace) -> bool:
    return any(span.attributes.get(MemTrace.EVALUATION_PASSED) is False for span in trace.spans)


class AttributionService:
    """Attributes failed traces as they settle and writes the verdicts back as spans.

    Parameters
    ----------
    exporter:
        Where annotation spans go (OTLP to the trace backend); held in an
        :class:`OutboxSpanProcessor`, so nothing is lost while the backend is down.
    backend:
        A :class:`~memtrace_otel.spans.backend.TraceBackend` to fetch linked traces
        from; ``None`` attributes each trace alone (and says so once).
    assembler:
        The trace buffer (its ``settle_seconds`` and byte ceiling).
    engine:
        Attribution engine name.
    max_jobs:
        Failed traces waiting for attribution at most; more are dropped and counted.
    annotate:
        Writes one verdict as spans (default: :mod:`memtrace_otel.writeback.annotations`); its
        last argument says whether the engine's explanation may be written (``False`` when
        it may quote contents read from the content store, which the backend must not get).
    content_by_hash:
        Reads the texts spans left in a content store by hash
        (:class:`~memtrace_otel.content.ContentResolver`'s ``get``, ``--content-store``).
    store_lookback:
        Seconds before a failure over which the backend is searched for the traces that used
        the same memory stores (a retrieval that *missed* a memory has no link to its writer);
        ``0`` follows span links only. Needs a backend that can search
        (:class:`~memtrace_otel.spans.backend.TraceSearch`).
    """

    def __init__(self, exporter: SpanExporter, *, backend: TraceBackend | None = None,
                 assembler: TraceAssembler | None = None, engine: str = "lineage",
                 max_jobs: int = 10_000, tick_seconds: float = 0.2, annotate: Annotate | None = None,
                 outbox: OutboxSpanProcessor | None = None,
                 content_by_hash: ContentLookup | None = None,
                 store_lookback: float = DEFAULT_LOOKBACK_SECONDS) -> None:
        if max_jobs < 1 or tick_seconds <= 0 or store_lookback < 0:
            raise ValueError("max_jobs must be >= 1, tick_seconds > 0 and store_lookback >= 0")
        self.store_lookback = store_lookback
        self._warned_unsearchable = self._warned_no_content = False
        self.assembler = assembler or TraceAssembler()
        self.backend = backend
        self._content_by_hash = content_by_hash
        self.engine = create_engine(engine)
        self.stats = ServiceStats()
        self.outbox = outbox or OutboxSpanProcessor(exporter)
        self._provider = TracerProvider(resource=Resource.create({"service.name": "memtrace"}))
        self._provider.add_span_processor(self.outbox)
        self._tracer = self._provider.get_tracer("memtrace_otel.writeback", __version__)
        self._annotate = annotate or _default_annotate()
        self._tick = tick_seconds
        self._stop = threading.Event()
        # Failed traces wait here; one thread attributes them, one at a time (a batch of one: each
        # trace has its own fetches and graph).
        self._jobs: BatchWorker[AssembledTrace] = BatchWorker(
            _JobStep(self), name="memtrace-attribute", max_queue_size=max_jobs, max_batch_size=1)
        self._settler = threading.Thread(target=self._settle_loop, name="memtrace-settle", daemon=True)
        self._started = False

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> None:
        if not self._started:
            self._started = True
            self._settler.start()

    def stop(self, timeout: float = 30.0) -> bool:
        """Attribute what has arrived (settled or not), export it, stop; ``False`` on timeout."""
        deadline = time.monotonic() + timeout
        self._stop.set()
        if self._settler.is_alive():
            self._settler.join(max(0.0, deadline - time.monotonic()))
        self._enqueue(self.assembler.drain())
        drained = self._jobs.shutdown(max(0.0, deadline - time.monotonic()) * 1000)
        left_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
        flushed = self.outbox.force_flush(left_ms)
        self._provider.shutdown()
        return drained and flushed

    def wait_idle(self, timeout: float) -> bool:
        """Block until every failed trace queued so far is attributed (tests, shutdown)."""
        return self._jobs.force_flush(timeout * 1000)

    # -- ingest --------------------------------------------------------------
    def ingest(self, spans: list[SpanRecord], wire_bytes: int) -> bool:
        """Buffer a batch; ``False`` means overloaded: answer the sender with a retryable error."""
        if not self.assembler.offer(spans, wire_bytes):
            self.stats.add(spans_refused=len(spans))
            return False
        self.stats.add(spans_received=len(spans))
        return True

    # -- threads -------------------------------------------------------------
    def _settle_loop(self) -> None:
        while not self._stop.wait(self._tick):
            self._enqueue(self.assembler.settled())

    def _enqueue(self, traces: list[AssembledTrace]) -> None:
        self.stats.add(traces_settled=len(traces))
        failed = [t for t in traces if _has_failed_evaluation(t)]
        if not failed:
            return
        dropped = sum(self._jobs.submit(trace) is not None for trace in failed)
        self.stats.add(traces_failed=len(failed), jobs_dropped=dropped)
        if self.stats.jobs_dropped:
            _logger.warning("attribution queue full: %d failed trace(s) not attributed so far",
                            self.stats.jobs_dropped)

    def _attribute_job(self, job: AssembledTrace) -> None:
        try:
            self._attribute(job)
        except Exception as error:  # one bad trace must not stop the service
            self.stats.add(attribution_errors=1)
            _logger.exception("attributing trace %s failed: %s", job.trace_id, error)

    def _attribute(self, trace: AssembledTrace) -> None:
        # The library pipeline (attribution/runner.analyze): the traces the failure needs gathered
        # from the backend, one graph, the failures of this trace only (a failure of a fetched trace
        # belongs to the instance that owns it).
        found = analyze(trace.spans, self.engine, backend=self.backend, store_lookback=self.store_lookback,
                        content_by_hash=self._content_by_hash, traces={trace.trace_id}, warn=self._no_content)
        if found.gathered is not None:
            self._count_gathered(found.gathered, trace.trace_id)
        # Contents read from the store were kept out of the backend on purpose: the engine's words,
        # which may quote them, must not go back there (the annotation says names, ids, error type).
        quotable = self._content_by_hash is None or not any(
            MemTrace.CONTENT_REF in span.attributes for span in found.spans.spans)
        for attribution in found.attributions:
            self._annotate(self._tracer, found.graph, attribution, quotable)
            self.stats.add(attributions=1)

    def _no_content(self, message: str) -> None:
        if not self._warned_no_content:  # once per service, not per failure
            self._warned_no_content = True
            _logger.warning(message)

    def _count_gathered(self, gathered: Gathered, trace_id: str) -> None:
        """The fetches' counters and log lines (at most five problems of each fetch)."""
        first, *rest = gathered.linked
        self._count_linked(first)
        store = gathered.store
        if store is not None:
            if not store.searchable and not self._warned_unsearchable:
                self._warned_unsearchable = True
                _logger.warning("%s cannot search traces by attribute: only linked traces are fetched, so a "
                                "retrieval that missed a memory may be judged a ResponseError",
                                self.backend.name if self.backend else "the backend")
            self.stats.add(store_fetched=len(store.received - {trace_id}),
                           store_searches_limited=len(store.limited))
            for use in store.limited:
                _logger.warning("store %r of %s: the search returned its limit of traces; older ones were "
                                "not fetched", use.store_id, use.service)
            for problem in store.problems[:5]:
                _logger.warning("store trace search: %s", problem)
        for fetch in rest:
            self._count_linked(fetch)

    def _count_linked(self, fetched: LinkedFetch) -> None:
        self.stats.add(linked_fetched=len(fetched.received), linked_missing=len(fetched.still_missing))
        for problem in fetched.problems[:5]:
            _logger.warning("linked trace fetch: %s", problem)


class _JobStep:
    """The job queue's export step: attribute each trace (on the worker thread, with
    instrumentation suppressed by the worker)."""

    def __init__(self, service: AttributionService) -> None:
        self._service = service

    def export(self, batch: list[AssembledTrace]) -> bool:
        for job in batch:
            self._service._attribute_job(job)
        return True

    def shutdown(self) -> None:
        pass


def _default_annotate() -> Annotate:
    from memtrace_otel.writeback.annotations import annotate as write_back

    def annotate(tracer: Tracer, G: nx.DiGraph, attribution: Attribution, quotable: bool) -> None:
        write_back(tracer, G, [attribution], include_explanation=quotable)

    return annotate
