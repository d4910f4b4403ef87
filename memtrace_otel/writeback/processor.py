"""Attribution inside the application: a span processor beside the application's exporter.

:class:`AttributionSpanProcessor` keeps a bounded index of recent memory
operation spans and, when an evaluation span ends with
``memtrace.evaluation.passed = false``, hands the failure to a background
worker. The worker rebuilds the memory evolution graph from the index (with
the tracer's in-process contents, so it works with content capture off), runs
the engine, and writes the verdict back as spans through the same provider
(:mod:`memtrace_otel.writeback.annotations`), where the application's exporter
sends them on to Jaeger or Tempo like any other span.

Model calls traced by a GenAI client instrumentation (``opentelemetry-instrumentation-openai-v2``
and the like) while a memory operation is current are indexed too, with any spans between the
call and the operation, so the graph has the operation's internal steps
(:mod:`memtrace_otel.graph.genai_steps`) and a verdict can name the call that went wrong.

Register it **before** the exporter's processor::

    provider = TracerProvider()
    memory = MemoryTracer(provider)
    provider.add_span_processor(AttributionSpanProcessor(memory, tracer_provider=provider))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))

Processors are flushed and shut down in registration order: registered
first, this one drains its queue (emitting the last annotation spans into the
exporter's processor) before the exporter's processor flushes or shuts down.
Registered after it, the annotation spans of the final drain reach an
exporter's processor that has already flushed (they wait for its next export)
or shut down (they are dropped).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

import networkx as nx
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanContext, Tracer, TracerProvider

from memtrace_otel.attribution import Engine, create_engine
from memtrace_otel.attribution.runner import NO_CONTENT_WARNING, attribute_failures
from memtrace_otel.batch_worker import DROPPED_SHUTDOWN, BatchWorker
from memtrace_otel.graph import build_graph, operation_node_id
from memtrace_otel.graph.verdicts import evaluator_node_id
from memtrace_otel.instrument import MemoryTracer, current_operation
from memtrace_otel.semconv import (
    GENAI_CALL_OPERATIONS,
    GENAI_OPERATION_CATEGORY,
    WRITEBACK_SCOPE,
    GenAI,
    MemTrace,
)
from memtrace_otel.signals import failing_verdict
from memtrace_otel.spans.model import SpanRecord, record_from_readable
from memtrace_otel.version import __version__
from memtrace_otel.writeback.annotations import annotate
from memtrace_otel.writeback.metrics import AttributionMetrics

__all__ = ["AttributionSpanProcessor"]

_logger = logging.getLogger(__name__)

_DEFAULT_MAX_SPANS = 10_000
_DEFAULT_MAX_AGE_SECONDS = 3600.0
_DEFAULT_MAX_QUEUE = 256
_DEFAULT_TIMEOUT_MILLIS = 30_000
# The worker's CPU, as a share of one core: in CPython its work holds the GIL, so what it uses the
# application's threads lose. 5% leaves the application within the 10% the issue allows, with room
# for the per-span hooks. A burst of a quarter CPU-second lets a quiet application's rare failures
# through at once; a larger one would be a share of the first seconds of a busy one (1 s: 20% of 5 s).
_DEFAULT_CPU_BUDGET = 0.05
_BURST_CPU_SECONDS = 0.25

_CATEGORY, _GEN_AI_OPERATION = MemTrace.OPERATION_CATEGORY, GenAI.OPERATION_NAME
_PASSED = MemTrace.EVALUATION_PASSED
_KEYS = frozenset({_CATEGORY, _GEN_AI_OPERATION, _PASSED})
_MEMORY_OPERATIONS = frozenset(operation.value for operation in GENAI_OPERATION_CATEGORY)
_CALL_OPERATIONS = frozenset(operation.value for operation in GENAI_CALL_OPERATIONS)
# Spans between a model call and its memory operation: a span is kept when it ends if a kept call
# (or span) below it named it as its parent. At most this many such parents wait at once (one per
# open span between a call and its operation; one that never ends here, e.g. a remote parent,
# waits until pushed out), and a chain is followed at most this many spans up.
_MAX_WAITING_PARENTS = 1024
_MAX_HOPS = 16


def _positive_int(name: str, value: object) -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"{name} must be an int >= 1, not {value!r}")
    return value


def _budget(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValueError(f"cpu_budget must be a share of one core in (0, 1] or None, not {value!r}")
    return float(value)


def _positive_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a finite number of seconds > 0, not {value!r}")
    return float(value)


class AttributionSpanProcessor(SpanProcessor):
    """Attributes failed evaluations as they end and writes the verdicts back as spans.

    Parameters
    ----------
    tracer:
        The application's :class:`~memtrace_otel.MemoryTracer`; its in-process
        content store fills in the contents the spans do not carry.
    tracer_provider:
        Provider the annotation spans are written through (scope
        ``memtrace_otel.writeback``); the global one when ``None``. Give the
        provider this processor is added to.
    engine:
        Engine name (``lineage`` by default) or an :class:`Engine` object; only
        the worker thread uses it.
    engine_options:
        Options for :func:`~memtrace_otel.attribution.create_engine`.
    max_spans, max_age_seconds:
        Bounds of the index of recent memory-operation spans (and the model
        calls made inside them, with the spans in between); the oldest go
        first. A root cause older than either cannot be found. The processor
        holds ``max_spans`` spans at most (and the worker's converted copy of
        each, made when a failure needs a graph).
    max_queue:
        Failed evaluations waiting for the worker; beyond it new ones are
        dropped (counted in :meth:`stats`, warned about once).
    capture_content:
        Write the engine's explanation (which may quote memory contents) on the
        annotation spans; by default as the tracer captures content.
    cpu_budget:
        Share of one core the worker may use on average (default 0.05), ``None``
        for no limit. Building graphs and attributing failures holds the GIL, so
        it is taken from the application's threads: when failures come faster
        than the budget pays for, the worker skips them (counted in
        ``stats()['jobs_skipped_budget']``, logged once) rather than slow the
        application. It may spend a quarter CPU-second ahead (a burst), and one costly graph
        or case may overdraw it: what follows waits until that is paid back.
    meter_provider:
        Where the attribution metrics go (:mod:`memtrace_otel.writeback.metrics`: failures by
        error type, blamed operation and service; time per failure; drops); the global
        ``MeterProvider`` when ``None`` (a no-op until the application sets one).

    A failure is an evaluation span ending with ``memtrace.evaluation.passed = false``, or any
    span ending with an evaluator's failing ``gen_ai.evaluation.result`` event
    (:mod:`memtrace_otel.signals`), or a verdict recorded later against an answer's span
    (:func:`memtrace_otel.feedback.record_feedback`) while that answer's spans are still indexed.

    Raises
    ------
    ValueError
        A bound is not a positive number, or the engine name is unknown.

    Thread safety: ``on_end`` may be called from any thread; it does constant
    work and takes no lock for an ordinary span, a memory operation or a model
    call (it appends to a deque, counts in its thread's own key, and sets or pops
    one key of a bounded dict, each atomic in CPython), never raises, never waits
    for the worker. Failed
    evaluations go to a :class:`~memtrace_otel.batch_worker.BatchWorker` (its
    queue has its own short lock); its thread alone owns the index. The counters
    have a lock. ``force_flush`` and ``shutdown`` may be called from any thread
    but the worker's; ``shutdown`` has the SDK's signature (a timeout may be given).
    """

    def __init__(
        self,
        tracer: MemoryTracer,
        *,
        tracer_provider: TracerProvider | None = None,
        engine: str | Engine = "lineage",
        engine_options: Mapping[str, Any] | None = None,
        max_spans: int = _DEFAULT_MAX_SPANS,
        max_age_seconds: float = _DEFAULT_MAX_AGE_SECONDS,
        max_queue: int = _DEFAULT_MAX_QUEUE,
        capture_content: bool | None = None,
        cpu_budget: float | None = _DEFAULT_CPU_BUDGET,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        if not isinstance(tracer, MemoryTracer):
            raise ValueError(f"tracer must be a MemoryTracer, not {type(tracer).__name__}")
        self._max_spans = _positive_int("max_spans", max_spans)
        self._max_age_ns = int(_positive_seconds("max_age_seconds", max_age_seconds) * 1e9)
        self._max_queue = _positive_int("max_queue", max_queue)
        self._cpu_budget = _budget(cpu_budget)
        # CPU-seconds the worker may still spend (a token bucket, refilled at cpu_budget per second
        # of wall time up to the burst); the worker's alone.
        self._cpu_left, self._cpu_refilled = _BURST_CPU_SECONDS, time.monotonic()
        self._cpu_spent = 0.0  # CPU-seconds the worker spent on graphs and cases (stats: worker_cpu_ms)
        if isinstance(engine, Engine):
            self._engine = engine
        elif isinstance(engine, str):
            self._engine = create_engine(engine, **dict(engine_options or {}))
        else:
            raise ValueError(f"engine must be an engine name or an Engine, not {type(engine).__name__}")
        self._content = tracer.contents.get
        tracer.contents.read_in_process = True  # writers that keep contents only for a reader keep them now
        self._metrics = AttributionMetrics(meter_provider, source="processor")
        self._include_explanation = tracer.capture_content if capture_content is None else capture_content
        self._provider = tracer_provider
        self._writer: Tracer | None = None
        # One bounded index, appended to by the application threads (atomic, no lock; its maxlen
        # drops the oldest): max_spans is all it ever holds. The worker reads it by snapshot,
        # removes the spans past max_age, and converts spans to records only when it builds a graph
        # (the conversion costs as much as the build: done once per span, under the CPU budget).
        self._index: deque[ReadableSpan] = deque(maxlen=self._max_spans)  # oldest end first
        # Spans the application threads pushed out of the full index, by thread: each thread
        # counts in its own key (no lock per span, no lost update); stats() adds them up.
        self._evicted_by_thread: Counter[int] = Counter()
        self._evicted_age = 0
        # (trace id, span id) of a span a kept model call hangs under -> (its memory operation's
        # span id, hops left): filled and emptied by the application threads only.
        self._waiting: dict[tuple[int, int], tuple[int, int]] = {}
        # The worker's conversions, by span identity; weak, so a span pushed out of the index frees
        # its record too (the bound stays max_spans spans and records).
        self._records: weakref.WeakKeyDictionary[ReadableSpan, SpanRecord] = weakref.WeakKeyDictionary()
        self._counts: Counter[str] = Counter()
        self._warned: set[str] = set()
        self._counts_lock = threading.Lock()  # guards _counts and _warned
        # Failed evaluations wait here for the worker thread, which attributes them in batches (one
        # graph per batch) and drops aged spans at the end of every drain, with or without jobs.
        self._jobs: BatchWorker[ReadableSpan] = BatchWorker(
            _Step(self), name="MemTraceAttributionWorker", max_queue_size=self._max_queue,
            max_batch_size=self._max_queue, wake_at=1, export_empty=True)

    # -- application thread --------------------------------------------------------------------
    def on_end(self, span: ReadableSpan) -> None:
        """Index a memory-operation span or a model call inside one; queue a failed evaluation.

        Constant work, never raises.
        """
        try:
            # span._events, not span.events: the public property copies the events into a new tuple
            # (~0.6 µs, more than the rest of this method); ReadableSpan always has the private list.
            attributes: Any = span.attributes  # typed Optional; an ended SDK span always has its mapping
            # One C-level pass over the keys: the SDK's attribute mapping answers a missing key
            # by raising KeyError inside, which costs more than the rest of this method.
            present = _KEYS.intersection(attributes)
            if _CATEGORY not in present and (_GEN_AI_OPERATION not in present
                                             or attributes[_GEN_AI_OPERATION] not in _MEMORY_OPERATIONS):
                kept = False
                if _GEN_AI_OPERATION in present or self._waiting:
                    kept = self._step_span(span, attributes[_GEN_AI_OPERATION] if _GEN_AI_OPERATION in present
                                           else None)
                if span._events and failing_verdict(span) is not None:  # an evaluator judged this span
                    if not kept:
                        self._keep(span)
                    self._submit(span)
                return  # other application spans stay out of the graph
            scope = span.instrumentation_scope
            if scope is not None and scope.name == WRITEBACK_SCOPE:
                return  # our own annotation spans, coming back through the provider
            self._keep(span)
            if ((_PASSED in present and attributes[_PASSED] is False)
                    or (span._events and failing_verdict(span) is not None)):
                self._submit(span)
        except Exception:  # never let a bug here reach the application or the next processor
            self._problem("on_end_errors", "on_end failed; the span was not indexed", exc_info=True)

    def _keep(self, span: ReadableSpan) -> None:
        index = self._index
        if len(index) == self._max_spans:  # the append below drops the oldest
            self._evicted_by_thread[threading.get_ident()] += 1
        index.append(span)

    def _step_span(self, span: ReadableSpan, gen_ai_operation: object) -> bool:
        """Keep a model call made inside a memory operation, and each span between the two; whether kept.

        Children end before their parents: a kept call names its parent, which is kept when it
        ends in turn, up to the operation (kept anyway). Calls made outside any memory operation
        of this process (no current operation, or another trace) are left out.
        """
        context, parent = span.context, span.parent
        if gen_ai_operation in _CALL_OPERATIONS:
            operation = current_operation()
            if operation is None:
                return False
            target = operation.span.get_span_context()
            if target.trace_id != context.trace_id:
                return False
            owner, hops = target.span_id, _MAX_HOPS
        else:
            found = self._waiting.pop((context.trace_id, context.span_id), None)
            if found is None:
                return False
            owner, hops = found
        self._keep(span)
        if parent is not None and parent.span_id != owner and hops > 0:
            self._wait_for(parent.trace_id, parent.span_id, owner, hops - 1)
        return True

    def _wait_for(self, trace_id: int, span_id: int, owner: int, hops: int) -> None:
        waiting = self._waiting
        if len(waiting) >= _MAX_WAITING_PARENTS:
            # Push out the oldest (a parent that never ended in this process). Another thread may
            # change the dict meanwhile: then nothing is pushed out, and it stays bounded all the same.
            with contextlib.suppress(RuntimeError, StopIteration, KeyError):
                del waiting[next(iter(waiting))]
            self._count("step_parents_dropped")
        waiting[(trace_id, span_id)] = (owner, hops)

    def _submit(self, span: ReadableSpan) -> None:
        dropped = self._jobs.submit(span)
        if dropped is None:
            self._count("jobs_queued")
        elif dropped == DROPPED_SHUTDOWN:
            self._count("jobs_dropped_shutdown")
            self._metrics.dropped("shutdown")
        else:
            self._metrics.dropped("queue_full")
            self._problem("jobs_dropped_queue_full", "attribution queue full (max_queue=%d); failed "
                          "evaluations are being dropped without attribution (counted in "
                          "stats()['jobs_dropped_queue_full'])", self._max_queue)

    # -- worker thread ---------------------------------------------------------------------------
    def _export(self, batch: list[ReadableSpan]) -> None:
        """The worker's export step: drop aged spans, then attribute the batch on one graph (each
        job's span entered the index before the job was queued)."""
        try:
            self._drop_aged()
            if batch:
                self._attribute_batch(batch)
        except Exception:  # the worker must outlive any bug, or flush and shutdown would hang
            self._problem("worker_errors", "attribution worker failed; its batch was lost", exc_info=True)

    def _attribute_batch(self, batch: list[ReadableSpan]) -> None:
        if not self._within_budget(len(batch)):
            return
        started, wall = time.thread_time(), time.perf_counter()
        try:
            G, contexts = self._graph()
        except Exception:
            self._problem("graph_errors", "building the memory graph failed; %d failure(s) not attributed",
                          len(batch), exc_info=True)
            self._metrics.dropped("error", len(batch))
            return
        finally:
            self._spent(started)
        graph_share = (time.perf_counter() - wall) / len(batch)  # one graph serves the whole batch
        for done, evaluation in enumerate(batch):
            if not self._within_budget(len(batch) - done):
                return
            started, wall = time.thread_time(), time.perf_counter()
            try:
                self._attribute(G, contexts, evaluation.context, graph_share - wall)
            finally:
                self._spent(started)

    def _within_budget(self, jobs: int) -> bool:
        """Whether the worker may spend CPU now; if not, ``jobs`` failures are skipped (counted)."""
        if self._cpu_budget is None:
            return True
        now = time.monotonic()
        self._cpu_left = min(_BURST_CPU_SECONDS,
                             self._cpu_left + (now - self._cpu_refilled) * self._cpu_budget)
        self._cpu_refilled = now
        if self._cpu_left > 0:
            return True
        self._problem("jobs_skipped_budget", "attribution is over its CPU budget (cpu_budget=%g of a core): "
                      "failures come faster than it pays for and are skipped (counted in "
                      "stats()['jobs_skipped_budget'])", self._cpu_budget, amount=jobs)
        self._metrics.dropped("over_budget", jobs)
        return False

    def _spent(self, started: float) -> None:
        used = time.thread_time() - started
        self._cpu_left -= used
        self._cpu_spent += used

    def _drop_aged(self) -> None:
        """Remove the spans older than max_age from the index (the application may append meanwhile)."""
        index, cutoff = self._index, time.time_ns() - self._max_age_ns
        while True:
            try:
                oldest = index[0]
            except IndexError:
                return
            if (oldest.end_time or 0) >= cutoff:
                return
            try:
                index.remove(oldest)  # found at once, at the left; gone already if the index was full
            except ValueError:
                continue
            self._evicted_age += 1

    def _snapshot(self) -> list[ReadableSpan]:
        # Copying is one C call; an append from another thread in the middle of it is retried.
        while True:
            try:
                return list(self._index)
            except RuntimeError:  # deque mutated during iteration
                continue

    def _graph(self) -> tuple[nx.DiGraph, dict[tuple[str, str], SpanContext]]:
        """The graph of the indexed spans, and their span contexts."""
        # Converted once per span, not once per batch: the conversion costs as much as the build.
        spans, records = self._snapshot(), self._records
        for span in spans:
            if span not in records:
                records[span] = record_from_readable(span)
        held = [records[span] for span in spans]
        contexts = {(record.trace_id, record.span_id): span.context
                    for span, record in zip(spans, held, strict=True)}
        return build_graph(held, content=self._content), contexts

    def _attribute(self, G: nx.DiGraph, contexts: dict[tuple[str, str], SpanContext],
                   evaluation: SpanContext, clock: float) -> None:
        """Attribute one failure; ``clock + perf_counter()`` is the time it has taken so far."""
        trace_id, span_id = f"{evaluation.trace_id:032x}", f"{evaluation.span_id:016x}"
        node = operation_node_id(trace_id, span_id)
        if "passed" not in G._node.get(node, {}):  # an evaluator's result on the span: a node of its own
            node = evaluator_node_id(trace_id, span_id)
        if node not in G:  # its span left the index before the worker got to it
            self._problem("jobs_evicted", "a failed evaluation's span left the index (max_spans=%d, "
                          "max_age_seconds=%g) before the worker attributed it; counted in "
                          "stats()['jobs_evicted']", self._max_spans, self._max_age_ns / 1e9)
            self._metrics.dropped("evicted")
            return
        try:
            (verdict,) = attribute_failures(G, self._engine, evaluations=[node], warn=self._warn)
        except Exception:
            self._problem("engine_errors", "engine %s raised; failure %s not attributed",
                          self._engine.name, node, exc_info=True)
            self._metrics.dropped("error")
            return
        try:
            spans = annotate(self._annotation_tracer(), G, [verdict],
                             include_explanation=self._include_explanation, span_contexts=contexts)
        except Exception:
            self._problem("write_errors", "writing the annotation spans failed", exc_info=True)
            self._metrics.dropped("error")
            return
        self._count("attributed" if verdict.operation else "unattributed")
        self._count("annotation_spans", len(spans))
        self._metrics.attributed(G, verdict, clock + time.perf_counter())

    def _warn(self, message: str) -> None:
        # No content (only with keep_content_in_process=0 and capture off), or the engine raised on
        # the case: each said once, counted per failure.
        self._problem("no_content" if message == NO_CONTENT_WARNING else "engine_failures", message)

    def _annotation_tracer(self) -> Tracer:
        if self._writer is None:  # resolved late: the global provider may be set after construction
            provider = self._provider or trace.get_tracer_provider()
            self._writer = provider.get_tracer(WRITEBACK_SCOPE, __version__)
        return self._writer

    # -- bookkeeping -----------------------------------------------------------------------------
    def _count(self, key: str, amount: int = 1) -> None:
        with self._counts_lock:
            self._counts[key] += amount

    def _problem(self, key: str, message: str, *args: object, exc_info: bool = False,
                 amount: int = 1) -> None:
        """Count a problem and log it the first time only (a broken engine must not flood the log)."""
        with self._counts_lock:
            self._counts[key] += amount
            first = key not in self._warned
            self._warned.add(key)
        if first:
            _logger.warning(message, *args, exc_info=exc_info)

    def stats(self) -> dict[str, int]:
        """Counters: spans indexed and evicted, jobs queued, dropped and attributed, errors.

        ``indexed`` spans are held (``max_spans`` at most); ``waiting`` ones of them the worker has
        not converted yet (it does when a failure needs a graph). Keys: ``indexed``, ``waiting``,
        ``evicted_size``, ``evicted_age``, ``jobs_queued``,
        ``jobs_dropped_queue_full``, ``jobs_dropped_shutdown``, ``jobs_evicted``,
        ``attributed``, ``unattributed``, ``annotation_spans``, ``on_end_errors``,
        ``graph_errors``, ``engine_errors``, ``write_errors``, ``worker_errors``,
        ``engine_failures`` (the engine raised on the case: a bug; its verdict says so),
        ``step_parents_dropped`` (spans between a model call and its operation no longer
        waited for: the call may lose its operation), ``jobs_unattributed_shutdown`` (queued
        when :meth:`shutdown`'s deadline passed), ``jobs_skipped_budget`` (over the CPU
        budget), ``worker_cpu_ms`` (CPU time the worker spent building graphs and attributing: in
        CPython, GIL time the application's threads did not have) (zero when nothing happened).
        """
        keys = ("jobs_queued", "jobs_dropped_queue_full", "jobs_dropped_shutdown",
                "jobs_evicted", "jobs_skipped_budget", "attributed", "unattributed", "annotation_spans",
                "on_end_errors", "graph_errors", "engine_errors", "engine_failures", "write_errors",
                "worker_errors", "step_parents_dropped")
        # Plain reads of the worker's ints and deque lengths: atomic, at worst a moment old.
        spans, records = self._snapshot(), self._records
        result = {"indexed": len(spans), "waiting": sum(span not in records for span in spans),
                  "evicted_size": sum(list(self._evicted_by_thread.values())),
                  "evicted_age": self._evicted_age, "worker_cpu_ms": round(self._cpu_spent * 1000),
                  "jobs_unattributed_shutdown": self._jobs.unexported_at_shutdown}
        with self._counts_lock:
            result.update((key, self._counts[key]) for key in keys)
        return result

    # -- lifecycle -------------------------------------------------------------------------------
    def force_flush(self, timeout_millis: int = _DEFAULT_TIMEOUT_MILLIS) -> bool:
        """Attribute every queued failure and hand its annotation spans to the provider.

        Returns ``False`` when that did not finish within ``timeout_millis``
        (the worker goes on with it).
        """
        return self._jobs.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: int = _DEFAULT_TIMEOUT_MILLIS) -> None:
        """Stop accepting failures, drain the queue as :meth:`force_flush` does, stop the worker.

        One deadline covers the drain and the worker's exit; when it passes first, the failures
        not attributed are logged and counted (``stats()['jobs_unattributed_shutdown']``). A second
        call warns and does nothing.
        """
        if self._jobs.closed:
            _logger.warning("AttributionSpanProcessor.shutdown called more than once; ignored")
            return
        if not self._jobs.shutdown(timeout_millis):
            _logger.warning("AttributionSpanProcessor.shutdown: %d failed evaluation(s) not attributed "
                            "within %d ms", self._jobs.unexported_at_shutdown, timeout_millis)
            self._metrics.dropped("shutdown", self._jobs.unexported_at_shutdown)


class _Step:
    """The processor's export step for its :class:`BatchWorker` (a separate object: the processor's
    own ``shutdown`` is the SDK's, not the step's)."""

    def __init__(self, processor: AttributionSpanProcessor) -> None:
        self._processor = processor

    def export(self, batch: list[ReadableSpan]) -> bool:
        self._processor._export(batch)
        return True

    def shutdown(self) -> None:
        pass
