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
:meth:`settled` pops whole batches (one per offer) from the front of a queue kept in arrival order,
so releasing is O(released); a batch whose traces arrived in it alone, none failed (most batches), is
offered and settled by dictionary operations over the batch made in C (:meth:`settled_split`), not a
Python step per trace (at 200-span requests these steps were the largest part of the bookkeeping).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

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
        # A batch is one offer: (arrival, number) in _batches, oldest first, its index in _by_number. A trace
        # belongs to the batch it last arrived in (_last: trace id -> that batch's number); what the batches
        # before held of it is summed in _earlier. Most traces arrive in one batch and settle with it:
        # offering and settling them is a few dictionary operations per batch, made in C, not a step per
        # trace. A batch half of whose traces arrived again is cut to the rest (_compact), so the indexes
        # kept hold at most about twice the traces held: max_traces bounds them too.
        self._batches: deque[tuple[float, int]] = deque()
        self._by_number: dict[int, dict[str, tuple[int, bool]]] = {}
        self._moved: dict[int, int] = {}  # batch number -> its traces that arrived again since
        self._last: dict[str, int] = {}
        self._earlier: dict[str, tuple[int, bool]] = {}
        self._number = 0
        self._lock = threading.Lock()

    @property
    def held_traces(self) -> int:
        return len(self._last)

    def room_for(self, index: dict[str, tuple[int, bool]]) -> bool:
        """Whether a batch of these traces would fit (checked before it is stored)."""
        with self._lock:
            held = len(self._last)
            if not held or held + len(index) <= self.max_traces:  # fits even if every trace is new
                return True
            return held + len(index.keys() - self._last.keys()) <= self.max_traces

    def offer(self, index: dict[str, tuple[int, bool]]) -> None:
        """Note a stored batch (:func:`trace_index` of its spans; kept as it is, not to be changed)."""
        if not index:
            return
        now = self._clock()
        with self._lock:
            self._number += 1
            number, last = self._number, self._last
            if not last.keys().isdisjoint(index):  # traces seen before: what their last batch held moves
                for trace_id in [trace_id for trace_id in index if trace_id in last]:
                    before = last[trace_id]
                    held = self._by_number[before]
                    count, failed = held[trace_id]
                    earlier = self._earlier.get(trace_id)
                    self._earlier[trace_id] = (count, failed) if earlier is None else \
                        (earlier[0] + count, earlier[1] or failed)
                    del last[trace_id]  # re-added below, in this batch's order
                    moved = self._moved[before] = self._moved.get(before, 0) + 1
                    if 2 * moved >= len(held):
                        self._compact(before, held)
            last.update(dict.fromkeys(index, number))
            self._batches.append((now, number))
            self._by_number[number] = index

    def _compact(self, number: int, held: dict[str, tuple[int, bool]]) -> None:
        """Cut batch ``number``'s index to the traces still last arrived in it (lock held): a new dict, as
        the offered one is not to be changed; none left, the batch is gone. At most one step per trace
        moved out since the batch was offered or last cut."""
        last = self._last
        kept = {trace_id: value for trace_id, value in held.items() if last.get(trace_id) == number}
        self._moved.pop(number, None)
        if kept:
            self._by_number[number] = kept
        else:
            del self._by_number[number]

    def settled(self) -> list[AssembledTrace]:
        """Remove and return every trace quiet for at least ``settle_seconds``, in last-arrival order."""
        deadline = self._clock() - self.settle_seconds
        with self._lock:
            return [AssembledTrace(trace_id, count, failed, arrival)
                    for arrival, number, index in self._take(deadline)
                    for trace_id, count, failed in self._traces_of(number, index)]

    def settled_split(self) -> tuple[list[str], list[AssembledTrace]]:
        """:meth:`settled`, as ``serve`` needs it: the ids of the traces without a failed evaluation, and
        the failed traces (each in last-arrival order). A batch whose traces all arrived in it alone, and
        none failed (most), is settled without a step per trace."""
        deadline = self._clock() - self.settle_seconds
        clean: list[str] = []
        failed: list[AssembledTrace] = []
        with self._lock:
            last, earlier = self._last, self._earlier
            for arrival, number, index in self._take(deadline):
                if not self._moved.get(number) and (not earlier or earlier.keys().isdisjoint(index)) \
                        and not any(map(itemgetter(1), index.values())):
                    del self._by_number[number]
                    deque(map(last.__delitem__, index), maxlen=0)
                    clean.extend(index)
                    continue
                for trace_id, count, has_failed in self._traces_of(number, index):
                    if has_failed:
                        failed.append(AssembledTrace(trace_id, count, True, arrival))
                    else:
                        clean.append(trace_id)
        return clean, failed

    def drain(self) -> list[AssembledTrace]:
        """Remove and return every trace, settled or not (shutdown)."""
        with self._lock:
            return [AssembledTrace(trace_id, count, failed, arrival)
                    for arrival, number, index in self._take(None)
                    for trace_id, count, failed in self._traces_of(number, index)]

    def _take(self, deadline: float | None) -> list[tuple[float, int, dict[str, tuple[int, bool]]]]:
        """The batches that arrived by ``deadline`` (all: ``None``) and still hold a trace, with their
        indexes, oldest first, out of the queue (lock held)."""
        taken = []
        batches, by_number = self._batches, self._by_number
        while batches and (deadline is None or batches[0][0] <= deadline):
            arrival, number = batches.popleft()
            index = by_number.get(number)
            if index is not None:  # None: every trace it held arrived again later (_compact)
                taken.append((arrival, number, index))
        return taken

    def _traces_of(self, number: int, index: dict[str, tuple[int, bool]]) -> Iterator[tuple[str, int, bool]]:
        """``(trace id, spans, failed)`` of each trace that last arrived in batch ``number``, with what
        earlier batches held of it, out (lock held; consumed at once)."""
        del self._by_number[number]
        self._moved.pop(number, None)
        last, earlier = self._last, self._earlier
        for trace_id, (count, failed) in index.items():
            if last.get(trace_id) != number:
                continue  # arrived again since: it goes with its last batch
            del last[trace_id]
            before = earlier.pop(trace_id, None)
            if before is not None:
                count, failed = count + before[0], failed or before[1]
            yield trace_id, count, failed

    def keep_first(self, trace: AssembledTrace, spans: Sequence[SpanRecord]) -> None:
        """Give ``trace`` its spans read back from the store, at most ``max_trace_spans``."""
        trace.spans = list(spans[:self.max_trace_spans])
        trace.dropped = max(0, len(spans) - self.max_trace_spans)
