"""``add``'s internal stages as ``memtrace.stage`` events of its span, not spans of their own.

A traced ``add`` was five spans (the call, extraction, the search of existing memories, the
decision, each record written), each paying the SDK's start, end, validation and locking. A stage
adds nothing a span is needed for (nothing nests under it that is not ``add``'s already, nothing
else reads its span context), so by default it is recorded as one event on the ``add`` span.
:class:`StageOperation` is an :class:`~memtrace_otel.instrument.operation.Operation` whose span
is a plain collector (:class:`_StageRecord`); when the stage ends, its attributes (the keys a
stage span carries: name, category, ``memtrace.inputs`` / ``memtrace.outputs`` /
``memtrace.variables``, the GenAI retrieval and model attributes) become the attributes of one
``memtrace.stage`` event, with the stage's id and start time (``docs/conventions.md``, "Stages as
events"), its lineage lists joined into one string each (:func:`join_lists`). Its links (the
writers of the records it read) go on the ``add`` span, once per writer. The records an ``add``
creates, updates or deletes are such events too, with the GenAI memory-client attributes their
spans started with: an ``add`` is one span. A record's ``memtrace_traceparent`` then names the
``add`` span; the write stage's ``memtrace.outputs`` make it the record's writer in the graph.

The graph builder (:mod:`memtrace_otel.graph.stages`) makes each event the operation node the
stage span made, ``op:<trace_id>:<stage id>``. ``Mem0Instrumentor().instrument(stage_spans=True)``
(or ``MEMTRACE_MEM0_STAGE_SPANS=true``) keeps the stages as spans, for dashboards that count them.

Thread safety: a stage belongs to the call that opened it (mem0's worker thread); the event and
the links are added to the ``add`` span, which the SDK locks; the set of linked writers the stages
of one ``add`` share only grows (``set.add`` is atomic), a race costing at most a duplicate link.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from memtrace_otel.config import env_flag
from memtrace_otel.instrument.operation import Operation
from memtrace_otel.instrument.tracer import MemoryTracer
from memtrace_otel.semconv import (
    STAGE_LIST_SEPARATOR,
    Category,
    GenAI,
    GenAIOperation,
    MemTrace,
    MemTraceEvent,
    MemTraceStage,
    MemTraceStep,
)

__all__ = ["StageOperation", "join_lists", "joined_list", "stage_spans_default"]

_STEPS = MemTrace.STEP_NAMES
_JOINED, _SEPARATOR = MemTraceStage.JOINED, STAGE_LIST_SEPARATOR
_STEP_INPUTS, _STEP_OUTPUTS = MemTraceStep.INPUTS, MemTraceStep.OUTPUTS
_ENV = "MEMTRACE_MEM0_STAGE_SPANS"
_random = random.Random()  # without the SDK's id generator: its own, as the SDK's RandomIdGenerator


def stage_spans_default() -> bool:
    """Whether ``MEMTRACE_MEM0_STAGE_SPANS`` asks for the stages as spans
    (:func:`~memtrace_otel.config.env_flag`: ``true``/``1``/``yes``/``on``; another value warns once)."""
    return env_flag(_ENV)


class _StageRecord:
    """What an :class:`Operation` writes on its span, kept for the stage's event.

    The subset of the span API an operation uses; links go to the span the stage is recorded on
    (the stage operation asks once per writer span: its set of linked writers is the ``add``'s).
    """

    __slots__ = ("attributes", "host", "steps")

    def __init__(self, host: Any) -> None:
        self.host = host
        self.attributes: dict[str, AttributeValue] = {}
        self.steps: list[Mapping[str, AttributeValue]] = []

    def is_recording(self) -> bool:
        return True

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        self.attributes.update(attributes)

    def add_event(self, name: str, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        if name == MemTraceEvent.STEP and attributes is not None:
            self.steps.append(attributes)

    def add_link(self, context: SpanContext, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        self.host.add_link(context, attributes)

    def set_status(self, status: Status) -> None:
        if status.status_code is StatusCode.ERROR:
            self.attributes.setdefault(GenAI.ERROR_TYPE, "error")

    def record_exception(self, exc: BaseException) -> None:
        """The exception is the ``add``'s too: its span records it."""

    def update_name(self, name: str) -> None:
        """A stage's name is its ``memtrace.operation.name``."""


class StageOperation(Operation):
    """A stage of ``add`` recorded as a ``memtrace.stage`` event of ``host``'s span.

    Reads, writes, steps and GenAI attributes work as on any operation; the variables it writes
    name the ``add`` span as their producer (a real span, for the links of whoever reads them),
    while the graph makes the stage their writer through the event's ``memtrace.outputs``.
    """

    __slots__ = ("_host", "_shared_links", "_started", "stage_id")

    def __init__(self, tracer: MemoryTracer, name: str, category: Category, host: Operation,
                 linked: set[int], *, attributes: dict[str, Any] | None = None,
                 gen_ai_operation: GenAIOperation | None = None) -> None:
        # ``attributes``: the start attributes the stage's span would have had (a write's GenAI
        # memory-client attributes, from ``MemoryTracer.operation``); by default its name and category.
        start = attributes if attributes is not None else {
            MemTrace.OPERATION_CATEGORY: category.value, MemTrace.OPERATION_NAME: name}
        super().__init__(tracer, name, category, span_name=name, kind=SpanKind.INTERNAL, attributes=start,
                         gen_ai_operation=gen_ai_operation)
        self._host = host
        self._shared_links = linked
        ids = getattr(tracer._tracer, "id_generator", None)  # the provider's: a seeded one seeds stages too
        self.stage_id = (ids.generate_span_id() if ids is not None else _random.getrandbits(64)) or 1
        """The stage's id: a span id from the tracer provider's id generator, which no span gets."""
        self._started = 0

    def __enter__(self) -> Operation:
        host = self._host
        self._recording = host._recording
        if self._recording:
            self.span = _StageRecord(host.span)  # type: ignore[assignment]
            self._context = context = host.span_context
            # Every stage of one add links a writer once, on the add span, and never the add itself
            # (the stages' own variables name it as their producer).
            linked = self._shared_links
            if not linked:
                linked.add(context.span_id)
            self._linked = linked
            self._started = time.time_ns()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._finished:
            return
        self._finished = True
        if not self._recording:
            return
        record: _StageRecord = self.span  # type: ignore[assignment]
        if exc is not None:
            record.attributes[GenAI.ERROR_TYPE] = type(exc).__qualname__
        self._flush_lineage()
        attributes = record.attributes
        attributes.update(self._start)
        attributes[MemTraceStage.ID] = f"{self.stage_id:016x}"
        attributes[MemTraceStage.START] = self._started
        if record.steps and not _is_chain(record.steps, self.inputs, self.outputs):
            # Steps the chain rule cannot say: each its own step event naming the stage.
            stage = attributes[MemTraceStage.ID]
            for step in record.steps:
                self._host.span.add_event(MemTraceEvent.STEP, {**step, MemTraceStage.ID: stage})
            attributes.pop(_STEPS, None)
        join_lists(attributes, self._host.span)
        self._host.span.add_event(MemTraceEvent.STAGE, attributes)


def join_lists(attributes: dict[str, AttributeValue], span: Any) -> None:
    """The lineage lists of a stage event as one string each (``MemTraceStage.JOINED``).

    The SDK checks every element of an array attribute, one call each: a hundred list values per
    ``add`` were a fifth of the stage events' cost. A list stays a list when an element holds the
    separator (told by counting separators in the joined text, without a loop here) or when the
    joined text would pass the span's attribute length limit (the SDK would cut it mid-element).

    >>> a = {"memtrace.inputs": ["m@1", "f@2"], "memtrace.outputs": ["a\\nb@1"], "x": ["y"]}
    >>> join_lists(a, None); a
    {'memtrace.inputs': 'm@1\\nf@2', 'memtrace.outputs': ['a\\nb@1'], 'x': ['y']}
    """
    limit = getattr(getattr(span, "_limits", None), "max_attribute_length", None)
    for key in _JOINED:
        values = attributes.get(key)
        if type(values) is list and values:
            attributes[key] = joined_list(values, limit)


def joined_list(values: list[str], limit: int | None) -> str | list[str]:
    """One lineage list as :func:`join_lists` leaves it: one string, unless an element holds the separator
    or the string would pass the span's attribute length ``limit`` (then the list itself).

    >>> joined_list(["m@1", "f@2"], None), joined_list(["a\\nb@1"], None), joined_list(["m@1", "f@2"], 4)
    ('m@1\\nf@2', ['a\\nb@1'], ['m@1', 'f@2'])
    """
    joined = _SEPARATOR.join(values)
    if joined.count(_SEPARATOR) == len(values) - 1 and (limit is None or len(joined) <= limit):
        return joined
    return values


def _is_chain(steps: list[Mapping[str, AttributeValue]], inputs: list[Any], outputs: list[Any]) -> bool:
    """Whether ``steps`` follow the chain rule: the first reads the stage's inputs, each later one the
    output of the one before, and step ``i`` writes the stage's output ``i`` alone (prompt -> raw
    response -> parsed facts). Such steps are said by ``memtrace.steps`` (their names) alone.

    >>> from types import SimpleNamespace as V
    >>> a, p, r = V(id="a@1"), V(id="p@1"), V(id="r@1")
    >>> steps = [{"memtrace.step.inputs": ["a@1"], "memtrace.step.outputs": ["p@1"]},
    ...          {"memtrace.step.inputs": ["p@1"], "memtrace.step.outputs": ["r@1"]}]
    >>> _is_chain(steps, [a], [p, r]), _is_chain(steps, [a], [r, p])
    (True, False)
    """
    if len(steps) != len(outputs):
        return False
    previous = [v.id for v in inputs]
    for step, output in zip(steps, outputs, strict=True):
        step_inputs, step_outputs = step.get(_STEP_INPUTS), step.get(_STEP_OUTPUTS)
        if not isinstance(step_inputs, list | tuple) or not isinstance(step_outputs, list | tuple):
            return False
        if list(step_inputs) != previous or list(step_outputs) != [output.id]:
            return False
        previous = [output.id]
    return True
