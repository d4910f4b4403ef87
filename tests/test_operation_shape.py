"""The end of a traced operation, rewritten for speed (issue 28, item 2), records what it recorded.

``_record_lineage`` (the end of every operation) builds the lineage attributes once per operation and
``describe`` formats each descriptor inline. Here the same pipeline (``scenario.run_pipeline``: ingestion,
extraction with steps, an update, a delete, searches that read records back, evaluations) runs twice on
span ids from one seeded sequence: once with the implementation of the code before the change (kept below
as the reference) and once with the current one. Every span must carry the same attributes, events and
links, and the evolution graphs built from the two runs must be the same graph.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.graph import build_graph
from memtrace_otel.instrument import operation as operation_module
from memtrace_otel.instrument.genai import stored_records_attributes
from memtrace_otel.instrument.operation import _upload
from memtrace_otel.instrument.variables import Variable
from memtrace_otel.semconv import MemTrace, MemTraceLink, VariableKind
from memtrace_otel.spans import record_from_readable
from memtrace_otel.wire import describe as wire_describe

from graph_compare import assert_same_graph
from scenario import SeededIds, run_pipeline


def _reference_describe(variable: Variable) -> str:
    return wire_describe(variable.kind.value, variable.size, variable.hash, variable.id)


def _reference_lineage(owner: Any, span: Any, context: Any, inputs: list[Variable], outputs: list[Variable],
                       attributes: dict[str, Any], linked: set[int] | None, deleted: bool,
                       steps: list[str] | None, storing: bool) -> None:
    """``_record_lineage`` (``Operation._flush_lineage`` until session 46) as it was before issue 28 (a pass
    per list, ``wire.describe``), with what ``read`` and ``write`` did when called up to session 38 and the
    lineage does now: a link per producer span (the first variable read from it names it) unless the
    producer is the span's parent, and the in-process contents of the outputs the span does not carry
    whole. ``storing`` is the caller's: a GenAI memory write whose stored records were not recorded."""
    linked = linked if linked is not None else set()
    parent = getattr(span, "parent", None)
    for v in inputs:
        producer = v.producer
        if producer is None or not producer.is_valid or producer.span_id in linked:
            continue
        linked.add(producer.span_id)
        if parent is None or (parent.trace_id, parent.span_id) != (producer.trace_id, producer.span_id):
            span.add_link(producer, {MemTraceLink.VARIABLE: v.id})
    for v in outputs:
        if v.content is not None and (not owner.capture_content or len(v.content) > owner.content_max_chars):
            owner.contents.put(v.id, v.content)
    attributes = dict(attributes)
    if inputs:
        attributes[MemTrace.INPUTS] = [v.id for v in inputs]
    if outputs:
        attributes[MemTrace.OUTPUTS] = [v.id for v in outputs]
        deleted_ids = [v.id for v in outputs if v.deleted]
        if deleted_ids:
            attributes[MemTrace.DELETED] = deleted_ids
    described = [v for v in inputs if v.producer is None] + outputs
    if described:
        attributes[MemTrace.VARIABLES] = [_reference_describe(v) for v in described]
        if owner.capture_content:
            limit = owner.content_max_chars
            attributes[MemTrace.VARIABLE_CONTENTS] = [
                (v.content or "") if len(v.content or "") <= limit else (v.content or "")[:limit]
                for v in described]
        uploader = owner.uploader
        if uploader is not None:
            _upload(uploader, described)
            attributes[MemTrace.CONTENT_REF] = owner.content_ref
    if steps:
        attributes[MemTrace.STEP_NAMES] = steps
    if owner.capture_content and storing:
        stored = [v for v in outputs if v.kind is VariableKind.MEMORY_UNIT and not v.deleted]
        if stored:
            attributes.update(stored_records_attributes(stored, capture=True, limit=owner.content_max_chars))
    if attributes:
        span.set_attributes(attributes)


def _run(monkeypatch: pytest.MonkeyPatch, *, reference: bool, capture: bool) -> list[Any]:
    with monkeypatch.context() as patch:
        if reference:
            patch.setattr(operation_module, "_record_lineage", _reference_lineage)
            patch.setattr(operation_module, "describe", _reference_describe)
        exporter = InMemorySpanExporter()
        provider = TracerProvider(id_generator=SeededIds(28))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        run_pipeline(provider, capture_content=capture)
        provider.shutdown()
    return list(exporter.get_finished_spans())


def _shape(span: Any) -> tuple[Any, ...]:
    return (span.name, span.context.span_id, span.parent.span_id if span.parent else None, span.kind,
            dict(span.attributes), [(e.name, dict(e.attributes)) for e in span.events],
            [(link.context.trace_id, link.context.span_id, dict(link.attributes)) for link in span.links])


def _untimed(spans: list[Any]) -> Any:
    # Two runs differ only in their clocks: the graphs are compared with every time zeroed (the
    # operations' order is by start time, the same in both: one program, one order).
    graph = build_graph(record_from_readable(s) for s in spans)
    for _, data in graph.nodes(data=True):
        for key in ("start", "end"):
            if key in data:
                data[key] = 0
    return graph


@pytest.mark.parametrize("capture", [False, True], ids=["content-off", "content-on"])
def test_current_flush_records_what_the_reference_recorded(monkeypatch: pytest.MonkeyPatch,
                                                           capture: bool) -> None:
    before = _run(monkeypatch, reference=True, capture=capture)
    after = _run(monkeypatch, reference=False, capture=capture)
    assert len(before) == len(after) > 10
    assert any(MemTrace.DELETED in s.attributes for s in after)  # the scenario deletes a record
    assert any(s.links for s in after) and any(s.events for s in after)
    for old, new in zip(before, after, strict=True):
        assert _shape(new) == _shape(old)
    assert_same_graph(_untimed(before), _untimed(after))


def test_describe_is_the_wire_format() -> None:
    for kind in VariableKind:
        for content in (None, "", "hello", "é" * 3):
            variable = Variable("v:1", 2, kind, content)
            assert operation_module.describe(variable) == _reference_describe(variable)
