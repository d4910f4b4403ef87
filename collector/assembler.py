"""Which traces are waiting to settle: an index, the spans themselves being in the write-ahead store.

Like the Collector's ``tail_sampling`` processor, a trace is judged only
after no span of it has arrived for ``settle_seconds`` (its decision wait):
spans of one trace come from many processes and batches, and a failed
evaluation is only worth attributing once the operations before it are in.

The spans are kept on disk (:mod:`~memtrace_otel.collector.durable`), not here: the index holds a
few numbers per trace (spans seen, whether one is a failed evaluation, last arrival), so memory
does not grow with the spans waiting (it used to hold every decoded span, and its size estimate
was 3.5x low for attribute-dense spans). The index is bounded in traces (``max_traces``);
:meth:`TraceAssembler.offer` refuses a batch that would go over it, and the receiver answers with
OTLP's retryable "unavailable". A trace bigger than ``max_trace_spans`` is attributed from its
first spans (the rest counted as dropped when it is read back).

Thread safety: one lock guards all state; every method holds it for O(batch) work.
:meth:`settled` pops from the front of an insertion-ordered dict kept in last-arrival order,
so releasing is O(released).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from memtrace_otel.signals import is_failing
from memtrace_otel.spans.model import SpanRecord

__all__ = ["AssembledTrace", "TraceAssembler", "trace_index"]


@dataclass(slots=True)
class AssembledTrace:
    """One trace waiting to settle: spans seen, whether one is a failed evaluation, last arrival.
    ``spans`` is filled only when the trace is read back from the store to be attributed."""

    trace_id: str
    span_count: int = 0
    failed: bool = False
    last_arrival: float = 0.0
    spans: list[SpanRecord] = field(default_factory=list)
    dropped: int = 0


def trace_index(spans: Iterable[SpanRecord]) -> dict[str, tuple[int, bool]]:
    """``trace id -> (spans, holds a failed evaluation)``, in first-seen order."""
    index: dict[str, tuple[int, bool]] = {}
    for span in spans:
        count, failed = index.get(span.trace_id, (0, False))
        # memtrace's own verdict, or an evaluator's failing gen_ai.evaluation.result (signals.py)
        index[span.trace_id] = (count + 1, failed or is_failing(span))
    return index


class TraceAssembler:
    """Tracks traces until they settle.

    Parameters
    ----------
    settle_seconds:
        How long a trace must be quiet before it is released.
    max_traces:
        Traces tracked at most; a batch that would go over is refused.
    max_trace_spans:
        Spans attributed per trace; later ones are dropped and counted when it is read back.
    clock:
        Monotonic seconds (a test may pass its own).
    """

    def __init__(self, *, settle_seconds: float = 10.0, max_traces: int = 200_000,
                 max_trace_spans: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        if settle_seconds < 0:
            raise ValueError("settle_seconds must be >= 0")
        if max_traces < 1 or max_trace_spans < 1:
            raise ValueError("max_traces and max_trace_spans must be >= 1")
        self.settle_seconds = settle_seconds
        self.max_traces = max_traces
        self.max_trace_spans = max_trace_spans
        self._clock = clock
        self._traces: OrderedDict[str, AssembledTrace] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def held_traces(self) -> int:
        return len(self._traces)

    def room_for(self, index: dict[str, tuple[int, bool]]) -> bool:
        """Whether a batch of these traces would fit (checked before it is stored)."""
        with self._lock:
            held = len(self._traces)
            if not held or held + len(index) <= self.max_traces:  # fits even if every trace is new
                return True
            return held + len(index.keys() - self._traces.keys()) <= self.max_traces

    def offer(self, index: dict[str, tuple[int, bool]]) -> None:
        """Note a stored batch (:func:`trace_index` of its spans)."""
        now = self._clock()
        with self._lock:
            for trace_id, (count, failed) in index.items():
                trace = self._traces.get(trace_id)
                if trace is None:
                    trace = self._traces[trace_id] = AssembledTrace(trace_id)
                else:
                    self._traces.move_to_end(trace_id)
                trace.last_arrival = now
                trace.span_count += count
                trace.failed = trace.failed or failed

    def settled(self) -> list[AssembledTrace]:
        """Remove and return every trace quiet for at least ``settle_seconds``."""
        deadline = self._clock() - self.settle_seconds
        released = []
        with self._lock:
            while self._traces:
                trace = next(iter(self._traces.values()))
                if trace.last_arrival > deadline:
                    break
                self._traces.popitem(last=False)
                released.append(trace)
        return released

    def drain(self) -> list[AssembledTrace]:
        """Remove and return every trace, settled or not (shutdown)."""
        with self._lock:
            released = list(self._traces.values())
            self._traces.clear()
        return released

    def keep_first(self, trace: AssembledTrace, spans: Sequence[SpanRecord]) -> None:
        """Give ``trace`` its spans read back from the store, at most ``max_trace_spans``."""
        trace.spans = list(spans[:self.max_trace_spans])
        trace.dropped = max(0, len(spans) - self.max_trace_spans)
