"""The attribution service behind ``memtrace serve``: settled traces in, annotation spans out.

Data flow, one box per module::

    OTLP receivers (grpc_receiver, http_receiver; memory admission before decoding: memory)
        -> DurableStore (durable: the request committed to the write-ahead store, then acknowledged)
           + TraceAssembler (assembler: an index of the traces waiting to settle)
        -> settle thread: traces holding a failed evaluation become jobs; the others are forgotten
        -> attribution workers (a pool of bounded BatchWorkers): the trace read back from the store,
           attribution/runner.analyze (the library pipeline: the trace + the linked traces it lacks
           + the traces that used the same memory stores, fetched through the backend within the
           failure's budget: budget) -> annotation spans (writeback/annotations.annotations_of),
           encoded as OTLP (otlp_encode)
        -> one transaction: annotations into the store's outbox, the trace out of it (or kept to be
           judged again when the backend failed meanwhile: redo)
        -> DurableOutbox (export: OTLP to the backend; retryable answers retried, permanent dropped)

Each instance holds only the traces routed to it (the Collector's
``load_balancing`` exporter shards by trace id). Memory written in another
trace, possibly routed to another instance, is fetched from the trace backend
that already stores every span; instances share nothing.

Nothing acknowledged is lost when the process is killed: the store has the requests, the index
is replayed on start (those traces settle again) and so is the outbox.

Redo: a verdict made while the backend failed (down, timed out, 429/5xx; not "trace not found")
is written at once, marked ``memtrace.attribution.provisional``, and the failure is judged again
with backoff (3 s, doubling up to 2 min) until two attempts with the backend answering gather the
same traces (its senders may still be delivering what it missed; or after six attempts) or
``redo_seconds`` pass; the
new annotation spans carry
``memtrace.attribution.supersedes`` (the span ids of the provisional ones).

Thread safety: :meth:`AttributionService.ingest` may be called from any number of receiver
threads; the index, the store and each job queue have their own locks, and one lock makes
"store, then index" and "settle, then forget" atomic with respect to each other.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter

from memtrace_otel.attribution import create_engine
from memtrace_otel.attribution.base import Attribution
from memtrace_otel.attribution.runner import NO_CONTENT_WARNING, analyze
from memtrace_otel.batch_worker import BatchWorker
from memtrace_otel.collector.assembler import AssembledTrace, TraceAssembler, trace_index
from memtrace_otel.collector.budget import Budget, BudgetedBackend, RateLimiter, budgeted
from memtrace_otel.collector.durable import KIND_JSON, KIND_PICKLE, KIND_PROTOBUF, DurableStore, Redo, now
from memtrace_otel.collector.export import DurableOutbox, Sender, SpanExporterSender
from memtrace_otel.collector.memory import Admission
from memtrace_otel.collector.otlp_encode import AnnotationEncoder
from memtrace_otel.collector.otlp_proto import STORED, TakeFailed
from memtrace_otel.graph.build import ContentLookup
from memtrace_otel.semconv import WRITEBACK_SCOPE, AnnotationSpan, MemTrace, MemTraceAttribution
from memtrace_otel.spans.backend import TraceBackend
from memtrace_otel.spans.gather import Gathered
from memtrace_otel.spans.linked import LinkedFetch
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.spans.store_scope import DEFAULT_LOOKBACK_SECONDS
from memtrace_otel.version import __version__
from memtrace_otel.writeback.annotations import Annotation
from memtrace_otel.writeback.metrics import AttributionMetrics

__all__ = ["AttributionService", "ServiceStats"]

_logger = logging.getLogger(__name__)
Annotate = Callable[[nx.DiGraph, Attribution, bool, dict[str, Any]], Sequence[Annotation]]
_REDO_FIRST_SECONDS = 3.0
_REDO_MAX_SECONDS = 120.0
_REDO_ROUNDS = 6
_OUTBOX_DRAIN_SECONDS = 5.0


@dataclass(slots=True)
class ServiceStats:
    """Counters, for the stop summary and the tests. Thread-safe: :meth:`add` takes a lock
    (receiver threads, the settle thread and the workers all count)."""

    spans_received: int = 0
    spans_refused: int = 0
    traces_settled: int = 0
    traces_failed: int = 0
    traces_replayed: int = 0
    jobs_dropped: int = 0
    attributions: int = 0
    attribution_errors: int = 0
    linked_fetched: int = 0
    linked_missing: int = 0
    store_fetched: int = 0
    store_searches_limited: int = 0
    traces_over_budget: int = 0
    searches_over_budget: int = 0
    provisional: int = 0
    redone: int = 0
    redo_expired: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        """Add to the named counters, atomically."""
        with self._lock:
            for name, count in counts.items():
                setattr(self, name, getattr(self, name) + count)


@dataclass(slots=True)
class _Job:
    trace: AssembledTrace
    redo: Redo | None = None


def _decode_stored(kind: int, body: bytes, trace_ids: Sequence[str]) -> dict[str, list[SpanRecord]]:
    """The spans of each of ``trace_ids`` in one stored request (decoded as the receiver did)."""
    found: dict[str, list[SpanRecord]] = {trace_id: [] for trace_id in trace_ids}
    if kind == KIND_PICKLE:
        records: list[SpanRecord] = pickle.loads(body)  # written by this code (DurableStore.append_records)
    elif kind == KIND_JSON:
        import orjson

        from memtrace_otel.spans.otlp_json import records_from_traces_data

        records = list(records_from_traces_data(orjson.loads(body), STORED, []))
    else:
        from memtrace_otel.collector.otlp_proto import decode_request, records_from_request

        records = records_from_request(decode_request(body), STORED, [], trace_ids=set(trace_ids))
    for span in records:
        if span.trace_id in found:
            found[span.trace_id].append(span)
    return found


class _ReadBack:
    """The spans of failed traces read back from the store, a request at a time.

    A stored request holds many traces, often several failed ones: it is decoded once, for every
    failed trace in it, and their spans kept (few: failures are rare) until their jobs take them,
    so a large request is not parsed again per failure. The receivers hand over the spans of a
    request's failed traces they decoded while indexing it (:meth:`keep`): those are not read
    back at all. Reading one back takes its size from the receivers' admission (waiting for it),
    so decoding on the workers is bounded with theirs. What is kept is bounded by its spans.
    """

    _MAX_KEPT_SPANS = 20_000

    def __init__(self, store: DurableStore, admission: Admission | None) -> None:
        self._store = store
        self._admission = admission
        self._kept: dict[str, dict[int, list[SpanRecord]]] = {}  # trace id -> request id -> spans
        self._kept_spans = 0
        self._lock = threading.Lock()

    def room_for(self, counts: dict[str, int]) -> list[str]:
        """Of failed traces offered with their spans (``trace id -> spans``), those whose spans fit in
        what is kept now, in order (the receivers decode only those; the others are read back)."""
        with self._lock:
            room = self._MAX_KEPT_SPANS - self._kept_spans
        fits = []
        for trace_id, count in counts.items():
            if count <= room:
                fits.append(trace_id)
                room -= count
        return fits

    def keep(self, request_id: int, found: dict[str, list[SpanRecord]]) -> None:
        """The spans of failed traces in stored request ``request_id``, until their jobs take them (those
        past the bound are not kept: read back from the store instead)."""
        with self._lock:
            for trace_id, spans in found.items():
                have = self._kept.setdefault(trace_id, {})
                if request_id in have:
                    continue  # kept at receive, and read back again by another trace's job: counted once
                if self._kept_spans + len(spans) > self._MAX_KEPT_SPANS:
                    if not have:
                        del self._kept[trace_id]
                    continue
                have[request_id] = spans
                self._kept_spans += len(spans)

    def spans_of(self, trace_id: str) -> list[SpanRecord]:
        with self._lock:
            # All of the trace's, also of requests the store has dropped since (not read below).
            kept = self._kept.pop(trace_id, {})
            self._kept_spans -= sum(len(spans) for spans in kept.values())
        spans: list[SpanRecord] = []
        for request_id in self._store.request_ids_of(trace_id):
            found = kept.get(request_id)
            spans.extend(found if found is not None else self._decode(request_id, trace_id))
        return spans

    def _decode(self, request_id: int, trace_id: str) -> list[SpanRecord]:
        size = self._store.request_size(request_id)
        if self._admission is not None:
            self._admission.wait(size)
        try:
            stored = self._store.request(request_id)
            if stored is None:
                return []
            kind, body, failed = stored
            found = _decode_stored(kind, body, sorted({trace_id, *failed}))
            del body
        finally:
            if self._admission is not None:
                self._admission.give(size)
        mine = found.pop(trace_id, [])
        self.keep(request_id, found)
        return mine

    def forget(self, trace_id: str) -> None:
        """Drop what is kept for ``trace_id`` (its job is done or dropped)."""
        with self._lock:
            kept = self._kept.pop(trace_id, {})
            self._kept_spans -= sum(len(spans) for spans in kept.values())


class AttributionService:
    """Attributes failed traces as they settle and writes the verdicts back as spans.

    Parameters
    ----------
    exporter:
        Where annotation spans go: a :class:`~memtrace_otel.collector.export.Sender` (OTLP to the
        trace backend, with the Collector's retry rules) or any ``SpanExporter``; held in the
        store's outbox until accepted, so nothing is lost while the backend is down.
    backend:
        A :class:`~memtrace_otel.spans.backend.TraceBackend` to fetch linked traces
        from; ``None`` attributes each trace alone (and says so once).
    assembler:
        The index of traces waiting to settle (its ``settle_seconds``).
    engine:
        Attribution engine name.
    max_jobs:
        Failed traces waiting for attribution at most; more are dropped and counted.
    max_backlog:
        Failed traces waiting for a worker at which new spans are refused (retryable): the senders'
        queues hold them until attribution catches up, so the backlog, and the delay from a
        failure to its verdict, stay bounded and nothing reaches ``max_jobs``.
    annotate:
        Makes one verdict's annotation spans, as data (default:
        :func:`memtrace_otel.writeback.annotations.annotations_of`); its third argument says whether
        the engine's explanation may be written (``False`` when it may quote contents read from the
        content store, which the backend must not get), its fourth the marks to add (provisional,
        supersedes).
    content_by_hash:
        Reads the texts spans left in a content store by hash
        (:class:`~memtrace_otel.content.ContentResolver`'s ``get``, ``--content-store``).
    store_lookback:
        Seconds before a failure over which the backend is searched for the traces that used
        the same memory stores; ``0`` follows span links only.
    store:
        The write-ahead store (``--data-dir``); by default one in memory (nothing survives the
        process, for library use and tests).
    workers:
        Attribution threads: one expensive failure holds one of them, not the others.
    budget:
        What one failure may ask of the backend, and the backend's request rate.
    redo_seconds:
        How long a verdict made while the backend failed is retried; 0 turns redo off.
    admission:
        The receivers' bound on bytes being decoded; reading a stored request back takes from it.
    metrics:
        Where attribution outcomes are counted (:mod:`memtrace_otel.writeback.metrics`); by default
        the global ``MeterProvider`` (a no-op unless one is set; ``serve --metrics-otlp`` sets its own).
    """

    def __init__(self, exporter: SpanExporter | Sender, *, backend: TraceBackend | None = None,
                 assembler: TraceAssembler | None = None, engine: str = "lineage",
                 max_jobs: int = 10_000, tick_seconds: float = 0.2, annotate: Annotate | None = None,
                 content_by_hash: ContentLookup | None = None,
                 store_lookback: float = DEFAULT_LOOKBACK_SECONDS, store: DurableStore | None = None,
                 workers: int = 2, budget: Budget | None = None, redo_seconds: float = 3600.0,
                 max_backlog: int = 1000, admission: Admission | None = None,
                 metrics: AttributionMetrics | None = None) -> None:
        if max_jobs < 1 or tick_seconds <= 0 or store_lookback < 0 or workers < 1 or redo_seconds < 0:
            raise ValueError("max_jobs and workers must be >= 1, tick_seconds > 0, store_lookback and "
                             "redo_seconds >= 0")
        self.store_lookback = store_lookback
        self.max_backlog = max_backlog
        self._warned_unsearchable = False
        self._warned: set[bool] = set()  # the engine's warnings said: no content (True), engine failures
        self.assembler = assembler or TraceAssembler()
        self.backend = backend
        self._content_by_hash = content_by_hash
        self.engine = create_engine(engine)
        self.stats = ServiceStats()
        self.metrics = metrics or AttributionMetrics(source="serve")
        self.store = store or DurableStore(None)
        self.admission = admission
        self.memory_guard = admission.guard if admission is not None else None
        self._read_back = _ReadBack(self.store, admission)
        sender = exporter if isinstance(exporter, Sender) else SpanExporterSender(exporter)
        self.outbox = DurableOutbox(self.store, sender)
        # No tracer: the annotation spans are made as data, encoded, and stored. This resource (the
        # one an SDK tracer provider of serve's would have) is the fallback only: each annotation is
        # given the resource of the span it hangs under, so it is found under the application's service.
        self._encoder = AnnotationEncoder(Resource.create({"service.name": "memtrace"}), WRITEBACK_SCOPE,
                                          __version__)
        self._annotate = annotate or _default_annotate()
        self.budget = budget or Budget()
        self.limiter = RateLimiter(self.budget.rate)
        self.redo_seconds = redo_seconds
        self._tick = tick_seconds
        self._stop = threading.Event()
        self._index_lock = threading.Lock()  # "store then index" vs "settle then forget"
        # Failed traces wait here; each worker attributes one at a time (a batch of one: each trace
        # has its own fetches and graph). A job goes to the worker holding fewest.
        self._jobs: list[BatchWorker[_Job]] = [
            BatchWorker(_JobStep(self), name=f"memtrace-attribute-{n}",
                        max_queue_size=max(1, max_jobs // workers),
                        max_batch_size=1, wake_at=1) for n in range(workers)]
        self._redoing: set[str] = set()
        self._redo_lock = threading.Lock()
        self._next_redo_check = 0.0
        self._settler = threading.Thread(target=self._settle_loop, name="memtrace-settle", daemon=True)
        self._started = False
        self._replay()

    def _replay(self) -> None:
        """The traces a previous process acknowledged and did not finish settle again."""
        stored = self.store.stored_traces()
        if stored:
            self.assembler.offer({t.trace_id: (t.spans, t.failed) for t in stored})
            self.stats.add(traces_replayed=len(stored))
            _logger.warning("replaying %d trace(s) a previous run left in the data directory (%d failed)",
                            len(stored), sum(t.failed for t in stored))

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> None:
        if not self._started:
            self._started = True
            self._settler.start()

    def stop(self, timeout: float = 30.0) -> bool:
        """Attribute what has arrived (settled or not), export it, stop; ``False`` on timeout.

        What is not done by then stays in the store (a durable one replays it on the next start).
        """
        deadline = time.monotonic() + timeout
        self._stop.set()
        if self._settler.is_alive():
            self._settler.join(max(0.0, deadline - time.monotonic()))
        with self._index_lock:
            drained = self.assembler.drain()
            self._enqueue([t.trace_id for t in drained if not t.failed], [t for t in drained if t.failed])
        drained = all([job.shutdown(max(0.0, deadline - time.monotonic()) * 1000) for job in self._jobs])
        # The annotations are on disk: a backend that is down is not waited for long (the next start
        # sends them), where an in-memory outbox had to hold the whole drain up.
        flushed = self.outbox.shutdown(int(min(max(0.0, deadline - time.monotonic()), _OUTBOX_DRAIN_SECONDS)
                                           * 1000))
        self.outbox.held_at_stop = self.outbox.held
        self.store.close()
        return drained and flushed

    def wait_idle(self, timeout: float) -> bool:
        """Block until every failed trace queued so far is attributed (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        return all([job.force_flush(max(0.0, deadline - time.monotonic()) * 1000) for job in self._jobs])

    # -- ingest --------------------------------------------------------------
    def ingest(self, spans: list[SpanRecord], wire_bytes: int, body: bytes | None = None,
               kind: int = KIND_PROTOBUF) -> bool:
        """Store a batch, then index it; ``False`` means overloaded: answer with a retryable error.

        ``body`` is the request the spans were decoded from (``kind`` says its encoding): it is
        what is stored; without it, the spans themselves are.
        """
        index = trace_index(spans)
        if body is not None:
            return self.ingest_request(index, body, kind)
        if not self._admit(index):
            return False
        self._append(index, lambda: self.store.append_records(spans, index))
        return True

    def ingest_request(self, index: dict[str, tuple[int, bool]], body: bytes, kind: int,
                       failed: TakeFailed | None = None) -> bool:
        """:meth:`ingest` for a request given as received, with its :func:`trace_index` (the receivers
        make it without decoding the spans: ``otlp_proto.index_body``) and, optionally, ``failed``:
        decodes the spans of the failed traces it is given from the parse that indexed the request
        (``otlp_proto.IndexedRequest.take_failed``). It is called once the request is admitted, with
        the failed traces whose spans fit in what is kept for their attribution (the rest are read back
        from the store): a request answered 503 is not decoded for nothing, nor spans past the cap."""
        if not self._admit(index):
            return False
        if failed is None:
            spans: dict[str, list[SpanRecord]] = {}
        else:
            spans = failed(self._read_back.room_for(
                {trace_id: count for trace_id, (count, has_failed) in index.items() if has_failed}))

        def append() -> None:
            request_id = self.store.append(kind, body, index)
            if spans:  # before the index has the request: no job can read it back first
                self._read_back.keep(request_id, spans)

        self._append(index, append)
        return True

    def _admit(self, index: dict[str, tuple[int, bool]]) -> bool:
        """Whether there is room for a request of these traces; refused spans are counted."""
        if index and (not self.assembler.room_for(index) or self._backlog() >= self.max_backlog):
            self.stats.add(spans_refused=sum(count for count, _ in index.values()))
            return False
        return True

    def _append(self, index: dict[str, tuple[int, bool]], append: Callable[[], None]) -> None:
        """Store an admitted request (``append``), then index it."""
        if not index:
            return
        with self._index_lock:
            append()
            self.assembler.offer(index)
        self.stats.add(spans_received=sum(count for count, _ in index.values()))

    # -- threads -------------------------------------------------------------
    def _settle_loop(self) -> None:
        while not self._stop.wait(self._tick):
            try:
                with self._index_lock:
                    self._enqueue(*self.assembler.settled_split())
                self._check_redos()
            except Exception:  # the loop must outlive a full disk or a bug
                _logger.exception("settling traces failed; retrying")

    def _enqueue(self, clean: list[str], failed: list[AssembledTrace]) -> None:
        """With the index lock held: failed traces become jobs, the others (``clean``: their ids) are
        forgotten."""
        self.stats.add(traces_settled=len(clean) + len(failed))
        self.store.release(clean, settled_clean=True)
        if not failed:
            return
        dropped = [t.trace_id for t in failed if self._submit(_Job(t))]
        self.store.release(dropped)
        for trace_id in dropped:
            self._read_back.forget(trace_id)
        self.stats.add(traces_failed=len(failed), jobs_dropped=len(dropped))
        self.metrics.dropped("queue_full", len(dropped))
        if dropped:
            _logger.warning("attribution queue full: %d failed trace(s) not attributed so far",
                            self.stats.jobs_dropped)

    def _backlog(self) -> int:
        """Failed traces waiting for a worker."""
        return sum(worker.queued for worker in self._jobs)

    def _submit(self, job: _Job) -> bool:
        """Queue ``job`` with the least busy worker; ``True`` when it was dropped."""
        worker = min(self._jobs, key=lambda w: w.held)
        return worker.submit(job) is not None

    def _check_redos(self) -> None:
        if self.redo_seconds <= 0 or time.monotonic() < self._next_redo_check:
            return
        self._next_redo_check = time.monotonic() + 1.0
        current = now()
        for redo in self.store.redos():
            with self._redo_lock:
                if redo.trace_id in self._redoing:
                    continue
            if current >= redo.until:
                self.store.forget_redo(redo.trace_id)
                self._read_back.forget(redo.trace_id)  # spans another job's read-back kept for it
                self.stats.add(redo_expired=1)
                _logger.warning("trace %s: the backend did not answer within %g s; its provisional verdict "
                                "stays", redo.trace_id, self.redo_seconds)
                continue
            if current < redo.until - self.redo_seconds + _elapsed_waits(redo.attempts):  # not due yet
                continue
            with self._redo_lock:
                self._redoing.add(redo.trace_id)
            if self._submit(_Job(AssembledTrace(redo.trace_id, failed=True), redo)):
                with self._redo_lock:
                    self._redoing.discard(redo.trace_id)

    def _attribute_job(self, job: _Job) -> None:
        try:
            self._attribute(job)
        except Exception as error:  # one bad trace must not stop the service
            self.stats.add(attribution_errors=1)
            self.metrics.dropped("error")
            _logger.exception("attributing trace %s failed: %s", job.trace.trace_id, error)
            if job.redo is None:
                self.store.release([job.trace.trace_id])
        finally:
            if job.redo is not None:
                with self._redo_lock:
                    self._redoing.discard(job.trace.trace_id)

    def _attribute(self, job: _Job) -> None:
        started = time.perf_counter()
        trace = job.trace
        spans = self._read_back.spans_of(trace.trace_id)
        self.assembler.keep_first(trace, spans)
        if not trace.spans:  # dropped from a full store meanwhile (counted there)
            if job.redo is not None:
                self.store.forget_redo(trace.trace_id)
            return
        backend = budgeted(self.backend, self.budget, self.limiter) if self.backend is not None else None
        # The library pipeline (attribution/runner.analyze): the traces the failure needs gathered
        # from the backend, one graph, the failures of this trace only (a failure of a fetched trace
        # belongs to the instance that owns it).
        found = analyze(trace.spans, self.engine, backend=backend, store_lookback=self.store_lookback,
                        content_by_hash=self._content_by_hash, traces={trace.trace_id}, warn=self._no_content)
        if found.gathered is not None:
            self._count_gathered(found.gathered, trace.trace_id)
        if backend is not None:
            self._count_budget(backend, trace.trace_id)
        failed_backend = backend is not None and backend.failed and self.redo_seconds > 0
        if job.redo is not None:
            # A backend back from an outage may not hold every trace yet (its senders' queues are
            # still delivering): a redo is final once two attempts with the backend answering
            # gathered the same traces (or after a few attempts: some may never have been sent).
            seen = "" if failed_backend else _digest(found.spans.spans)
            redo = job.redo
            if failed_backend or (seen != redo.seen and redo.attempts < _REDO_ROUNDS):
                self.store.finish(trace.trace_id, [], redo=Redo(redo.trace_id, redo.until, redo.attempts + 1,
                                                                redo.superseded, seen))
                return
        marks: dict[str, Any] = {}
        if failed_backend:
            marks[MemTraceAttribution.PROVISIONAL] = True
        if job.redo is not None and job.redo.superseded:
            marks[MemTraceAttribution.SUPERSEDES] = job.redo.superseded.split(",")
        # Contents read from the store were kept out of the backend on purpose: the engine's words,
        # which may quote them, must not go back there (the annotation says names, ids, error type).
        quotable = self._content_by_hash is None or not any(
            MemTrace.CONTENT_REF in span.attributes for span in found.spans.spans)
        written: list[Annotation] = []
        for attribution in found.attributions:
            written.extend(self._annotate(found.graph, attribution, quotable, marks))
        # Each annotation under its application's service (issue 25): the resource of the span it
        # hangs under, so a search of that service by memtrace.error_type finds it.
        body, span_ids = self._encoder.encode(written, _resources(found.spans.spans, written))
        batches = [(len(written), body)] if written else []
        redo = None
        if failed_backend:
            attribution_spans = [span_id for annotation, span_id in zip(written, span_ids, strict=True)
                                 if annotation.role is AnnotationSpan.ATTRIBUTION]
            superseded = ",".join(f"{span_id:016x}" for span_id in attribution_spans)
            redo = Redo(trace.trace_id, now() + self.redo_seconds, 0, superseded)
            self.stats.add(provisional=len(found.attributions))
            _logger.warning("trace %s judged while the trace backend failed: verdict provisional, judged "
                            "again when it answers (within %g s)", trace.trace_id, self.redo_seconds)
        self.outbox.add(self.store.finish(trace.trace_id, batches, redo=redo))
        self.stats.add(attributions=len(found.attributions), redone=int(job.redo is not None))
        if found.attributions and job.redo is None:  # a redo replaces a verdict already counted
            share = (time.perf_counter() - started) / len(found.attributions)  # one gather and graph
            for attribution in found.attributions:
                self.metrics.attributed(found.graph, attribution, share)

    def _no_content(self, message: str) -> None:
        kind = message == NO_CONTENT_WARNING  # or the engine failed on the case: each kind once
        if kind not in self._warned:  # once per service, not per failure
            self._warned.add(kind)
            _logger.warning(message)

    def _count_budget(self, backend: BudgetedBackend, trace_id: str) -> None:
        if backend.traces_capped or backend.searches_capped:
            self.stats.add(traces_over_budget=backend.traces_capped,
                           searches_over_budget=backend.searches_capped)
            _logger.warning("trace %s: over its backend budget, %d trace fetch(es) and %d store search(es) "
                            "not made", trace_id, backend.traces_capped, backend.searches_capped)

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
            for use in store.limited[:5]:
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


def _resources(spans: Sequence[SpanRecord], annotations: Sequence[Annotation],
               ) -> dict[tuple[str, str], dict[str, Any]]:
    """(trace id, span id) -> the resource attributes the span was recorded with, for the spans the
    ``annotations`` hang under (``service.name`` from the record when the resource lacks it: Jaeger's
    reader keeps it apart)."""
    wanted = {(f"{a.parent.trace_id:032x}", f"{a.parent.span_id:016x}") for a in annotations}
    resources: dict[tuple[str, str], dict[str, Any]] = {}
    for span in spans:
        if (span.trace_id, span.span_id) not in wanted:
            continue
        attributes: dict[str, Any] = dict(span.resource_attributes)
        if span.service_name and "service.name" not in attributes:
            attributes["service.name"] = span.service_name
        if attributes:
            resources[(span.trace_id, span.span_id)] = attributes
    return resources


def _digest(spans: Sequence[SpanRecord]) -> str:
    """What a gathering found, in a few bytes: the sorted (trace id, span id) pairs, hashed."""
    import hashlib

    found = hashlib.sha256()
    for trace_id, span_id in sorted((span.trace_id, span.span_id) for span in spans):
        found.update(f"{trace_id}{span_id}".encode())
    return found.hexdigest()[:32]


def _elapsed_waits(attempts: int) -> float:
    """Seconds from a provisional verdict to redo number ``attempts + 1`` (3 s, then doubling)."""
    return sum(min(_REDO_FIRST_SECONDS * 2 ** n, _REDO_MAX_SECONDS) for n in range(attempts + 1))


class _JobStep:
    """A job queue's export step: attribute each trace (on the worker thread, with
    instrumentation suppressed by the worker)."""

    def __init__(self, service: AttributionService) -> None:
        self._service = service

    def export(self, batch: list[_Job]) -> bool:
        for job in batch:
            self._service._attribute_job(job)
        return True

    def shutdown(self) -> None:
        pass


def _default_annotate() -> Annotate:
    from memtrace_otel.writeback.annotations import annotations_of

    def annotate(G: nx.DiGraph, attribution: Attribution, quotable: bool,
                 marks: dict[str, Any]) -> Sequence[Annotation]:
        return annotations_of(G, [attribution], include_explanation=quotable, marks=marks)

    return annotate
