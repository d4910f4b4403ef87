"""Stages recorded as ``memtrace.stage`` events of a span, read back as the operations they are.

An instrumentation may record an operation's internal stages (mem0's ``add``: extraction, the
search of existing memories, the decision) as events of the operation's span rather than as
child spans (``docs/conventions.md``, "Stages as events"). :func:`stage_records` turns each such
event into the :class:`~memtrace_otel.spans.model.SpanRecord` the child span would have been, so
the builder makes the same operation node from it, with the same inputs, outputs, variables,
steps and attributes:

* trace id, service, source and scope of the span the event is on, which is its parent;
* span id: the stage id (``memtrace.stage.id``, 16 hex digits), so its node is
  ``op:<trace_id>:<stage id>``;
* start ``memtrace.stage.start_time_unix_nano`` (else the event's time), end the event's time;
  status ``ERROR`` when it carries ``error.type``;
* attributes: the event's, less the stage's own keys;
* steps: ``memtrace.step`` events of the span that name the stage (``memtrace.stage.id``), else
  its ``memtrace.steps`` names read by the chain rule: the first step reads the stage's inputs,
  each later one the output of the one before, step ``i`` writes the stage's output ``i``.

The builder marks the node ``stage_of`` (the carrying span's id): the write-back hangs a verdict on
a stage under that span, naming the stage. Readers hand events over as they are: OTLP/JSON, the
OTLP protobuf of ``memtrace serve``, and Jaeger, whose log fields are tags (the array keys are
decoded back by :mod:`memtrace_otel.spans.jaeger_json`). A malformed stage event is one problem
and is skipped; the rest of the span is read.
"""

from __future__ import annotations

from typing import Any

from memtrace_otel.graph.attributes import a_type, report
from memtrace_otel.semconv import (
    MEMORY_OPERATIONS,
    STAGE_LIST_SEPARATOR,
    GenAI,
    MemTrace,
    MemTraceEvent,
    MemTraceStage,
    MemTraceStep,
)
from memtrace_otel.spans.model import Problem, SpanEvent, SpanRecord

__all__ = ["has_stages", "stage_records"]

_STAGE, _STEP, _ID, _START = MemTraceEvent.STAGE, MemTraceEvent.STEP, MemTraceStage.ID, MemTraceStage.START
_INPUTS, _OUTPUTS, _STEPS = MemTrace.INPUTS, MemTrace.OUTPUTS, MemTrace.STEP_NAMES
_HEX = frozenset("0123456789abcdef")
_JOINED, _SEPARATOR = MemTraceStage.JOINED, STAGE_LIST_SEPARATOR
_MEMORY_OPERATIONS = frozenset(str(operation) for operation in MEMORY_OPERATIONS)


def has_stages(span: SpanRecord) -> bool:
    """Whether ``span`` carries ``memtrace.stage`` events."""
    return any(event.name == _STAGE for event in span.events)


def stage_records(span: SpanRecord, problems: list[Problem]) -> list[SpanRecord]:
    """The stages ``span``'s ``memtrace.stage`` events record, each as the span it stands for.

    >>> span = SpanRecord("ab" * 16, "cd" * 8, "upsert_memory", events=[SpanEvent("memtrace.stage", 9, {
    ...     "memtrace.stage.id": "12" * 8, "memtrace.stage.start_time_unix_nano": 5,
    ...     "memtrace.operation.name": "mem0.add.extract", "memtrace.operation.category": "extraction",
    ...     "memtrace.inputs": ["msg:1@1"], "memtrace.outputs": ["p@1", "f@1"],
    ...     "memtrace.steps": ["prompt", "parse"]})])
    >>> (stage,) = stage_records(span, [])
    >>> stage.span_id, stage.parent_span_id, stage.start_time_unix_nano, stage.end_time_unix_nano
    ('1212121212121212', 'cdcdcdcdcdcdcdcd', 5, 9)
    >>> [(e.attributes["memtrace.step.inputs"], e.attributes["memtrace.step.outputs"]) for e in stage.events]
    [(['msg:1@1'], ['p@1']), (['p@1'], ['f@1'])]
    """
    stages = []
    explicit: dict[str, list[SpanEvent]] | None = None
    for event in span.events:
        if event.name != _STAGE:
            continue
        a = event.attributes
        stage_id = a.get(_ID)
        if not (type(stage_id) is str and len(stage_id) == 16 and _HEX.issuperset(stage_id)
                and stage_id != "0" * 16 and stage_id != span.span_id):
            shown = repr(stage_id[:40]) if type(stage_id) is str else a_type(stage_id)
            report(problems, span, _ID, f"stage event with id {shown} (not 16 lowercase hex digits, "
                                        "or the span's own); skipped")
            continue
        if explicit is None:
            explicit = {}
            for step in span.events:
                owner = step.attributes.get(_ID) if step.name == _STEP else None
                if type(owner) is str:
                    own = {k: v for k, v in step.attributes.items() if k != _ID}
                    explicit.setdefault(owner, []).append(SpanEvent(_STEP, step.time_unix_nano, own))
        attributes = {k: v for k, v in a.items() if k != _ID and k != _START}
        for key in _JOINED:
            joined = attributes.get(key)
            if type(joined) is str:  # a lineage list as one string (MemTraceStage.JOINED)
                attributes[key] = joined.split(_SEPARATOR) if joined else []
        start = a.get(_START)
        end = event.time_unix_nano
        if type(start) is not int or start < 0:
            if start is not None:
                report(problems, span, _START, f"is {a_type(start)}, not a time in ns; the event's time "
                                               "is used")
            start = end
        steps = explicit.get(stage_id) or _chain(attributes, event.time_unix_nano)
        stages.append(SpanRecord(
            span.trace_id, stage_id, _span_name(attributes, span.name), span.span_id,
            start, max(start, end), attributes, steps, [],
            "ERROR" if GenAI.ERROR_TYPE in attributes else "UNSET", "", span.service_name, span.source,
            "INTERNAL", span.scope_name, span.scope_version, span.resource_attributes))
    return stages


def _span_name(attributes: dict[str, Any], host: str) -> str:
    """The name the stage's span would have had: a memory operation's ``gen_ai.operation.name`` (the
    GenAI conventions name a memory-client span so), else its ``memtrace.operation.name``, else the
    name of the span it is on."""
    gen_ai = attributes.get(GenAI.OPERATION_NAME)
    if type(gen_ai) is str and gen_ai in _MEMORY_OPERATIONS:
        return gen_ai
    name = attributes.get(MemTrace.OPERATION_NAME)
    return name if type(name) is str and name else host


def _chain(attributes: dict[str, Any], time: int) -> list[SpanEvent]:
    """The steps ``memtrace.steps`` names, by the chain rule; none when the lists do not fit it."""
    names, inputs, outputs = attributes.get(_STEPS), attributes.get(_INPUTS), attributes.get(_OUTPUTS)
    if not (type(names) is list and type(outputs) is list and len(names) == len(outputs)):
        return []
    steps, previous = [], list(inputs) if type(inputs) is list else []
    for name, output in zip(names, outputs, strict=True):
        steps.append(SpanEvent(_STEP, time, {MemTraceStep.NAME: name, MemTraceStep.INPUTS: previous,
                                              MemTraceStep.OUTPUTS: [output]}))
        previous = [output]
    return steps
