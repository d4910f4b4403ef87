"""Small evolution graphs for the LLM engine tests (built with the real tracer), and rendering tests."""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.attribution import FailureCase
from memtrace_otel.attribution.render import (
    OperationIndex,
    render_case,
    render_compacted_trace,
    render_flat_log,
    render_memory_life,
    render_operation,
    truncate,
)
from memtrace_otel.exporters import GraphSpanExporter
from memtrace_otel.graph.query import failed_evaluations, operations
from memtrace_otel.instrument import MemoryTracer
from memtrace_otel.semconv import Category

QUESTION = "When did Caroline adopt Max?"
GOLD = "May 2023"
PREDICTION = "I don't know"
DATED_MESSAGE = "Caroline: I adopted a dog named Max in May 2023"


def traced_graph(build: Callable[[MemoryTracer], None]) -> nx.DiGraph:
    """Run ``build`` on a real tracer whose spans go into a GraphSpanExporter; the graph."""
    exporter = GraphSpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        build(MemoryTracer(provider, capture_content=True))
        return exporter.graph()
    finally:
        provider.shutdown()


def _ask(mt: MemoryTracer, units: list, question: str, gold: str, prediction: str,
         evidence: list[str], tag: str) -> None:
    with mt.operation(f"search {tag}", Category.RETRIEVAL) as op:
        op.read(f"query:{tag}", content=question, kind="query")
        for unit in units:
            op.read(unit)
        joined = " | ".join(u.content or "" for u in units)
        context = op.write(f"ctx:{tag}", joined, kind="context")
    with mt.operation(f"answer {tag}", Category.GENERATION) as op:
        op.read(context)
        answer = op.write(f"answer:{tag}", prediction, kind="answer")
    with mt.operation(f"judge {tag}", Category.EVALUATION) as op:
        op.read(answer)
        op.record_evaluation(False, question=question, gold=gold, prediction=prediction,
                             evidence=evidence, answer=answer, case_id=tag)


def extraction_loss(mt: MemoryTracer) -> None:
    """The date is lost when the message is extracted: an ExtractionError at ``extract``."""
    with mt.operation("extract", Category.EXTRACTION) as op:
        op.read("msg:D1:1", content=DATED_MESSAGE, kind="message")
        op.read("msg:D1:2", content="Melanie: nice weather today", kind="message")
        unit = op.write("mem:1", "Caroline adopted a dog named Max", kind="memory_unit")
        other = op.write("mem:2", "Weather was nice", kind="memory_unit")
    with mt.operation("refresh", Category.UPDATE) as op:
        other = op.update(other, "Weather was nice and sunny")
    _ask(mt, [unit, other], QUESTION, GOLD, PREDICTION, ["D1:1"], "q1")


def deletion_loss(mt: MemoryTracer) -> None:
    """The dated unit is extracted right, then deleted: a DeletionError at ``forget``."""
    with mt.operation("extract", Category.EXTRACTION) as op:
        op.read("msg:D1:1", content=DATED_MESSAGE, kind="message")
        unit = op.write("mem:1", "Caroline adopted Max in May 2023", kind="memory_unit")
    with mt.operation("forget", Category.DELETION) as op:
        op.delete(unit)
    with mt.operation("extract more", Category.EXTRACTION) as op:
        op.read("msg:D2:1", content="Caroline: Max loves the park", kind="message")
        park = op.write("mem:2", "Max loves the park", kind="memory_unit")
    _ask(mt, [park], QUESTION, GOLD, PREDICTION, ["D1:1"], "q1")


def retrieval_miss(mt: MemoryTracer) -> None:
    """The dated unit is stored right but never retrieved: a RetrievalError at ``search q1``."""
    with mt.operation("extract", Category.EXTRACTION) as op:
        op.read("msg:D1:1", content=DATED_MESSAGE, kind="message")
        op.write("mem:1", "Caroline adopted Max in May 2023", kind="memory_unit")
    with mt.operation("extract more", Category.EXTRACTION) as op:
        op.read("msg:D1:2", content="Melanie: Max barks a lot", kind="message")
        noise = op.write("mem:2", "Max barks a lot", kind="memory_unit")
    _ask(mt, [noise], QUESTION, GOLD, PREDICTION, ["D1:1"], "q1")


def many_questions(mt: MemoryTracer) -> None:
    """Three failed questions over one store (for batches)."""
    extraction_loss(mt)
    with mt.operation("extract late", Category.EXTRACTION) as op:
        op.read("msg:D3:1", content="Melanie: I ran a marathon in Boston", kind="message")
        unit = op.write("mem:3", "Melanie ran a marathon", kind="memory_unit")
    _ask(mt, [unit], "Where did Melanie run a marathon?", "Boston", "Paris", ["D3:1"], "q2")
    _ask(mt, [unit], "What did Melanie run?", "a marathon", "a 5k", ["D3:1"], "q3")


def first_case(G: nx.DiGraph) -> FailureCase:
    return FailureCase.from_graph(G, failed_evaluations(G)[0])


def op_named(G: nx.DiGraph, name: str) -> str:
    return next(op for op in operations(G) if G.nodes[op]["name"] == name)


# -- rendering tests ---------------------------------------------------------------------------


def test_truncate_marks_the_cut_and_missing_content() -> None:
    assert truncate("x" * 50, 10) == "x" * 9 + "…"
    assert truncate("a\n  b", 10) == "a b"
    assert truncate(None) == "(content not captured)"


def test_operation_index_resolves_alias_node_key_and_span_id() -> None:
    G = traced_graph(extraction_loss)
    index = OperationIndex(G)
    op = op_named(G, "extract")
    alias = index.alias(op)
    assert alias == f"op{G.nodes[op]['order']}"
    assert index.resolve(alias) == op
    assert index.resolve(f" `{alias}` ") == op
    assert index.resolve(G.nodes[op]["span_id"]) == op
    assert index.resolve(op) == op
    assert index.resolve("op999") is None
    assert index.resolve(42) is None


def test_render_operation_shows_alias_ids_contents_and_limits() -> None:
    G = traced_graph(extraction_loss)
    index = OperationIndex(G)
    op = op_named(G, "extract")
    text = render_operation(G, op, index, max_chars=30, max_vars=1, focus=["msg:D1:1@1"])
    assert text.startswith(f"{index.alias(op)} extraction \"extract\"")
    assert "msg:D1:1@1 [message]" in text
    assert DATED_MESSAGE[:29] + "…" in text
    assert "msg:D1:2@1" not in text
    assert "in  … 1 more" in text and "out … 1 more" in text


def test_render_case_carries_question_gold_prediction_evidence_and_answer() -> None:
    G = traced_graph(extraction_loss)
    case = first_case(G)
    text = render_case(G, case, OperationIndex(G))
    for expected in (QUESTION, GOLD, PREDICTION, "D1:1", "answer:q1@1"):
        assert expected in text


def test_memory_life_shows_the_deletion() -> None:
    G = traced_graph(deletion_loss)
    index = OperationIndex(G)
    text = render_memory_life(G, "mem:1", index)
    forget = index.alias(op_named(G, "forget"))
    assert "mem:1@1" in text and "mem:1@2 [memory_unit]: (deleted)" in text
    assert f"written by {forget}" in text


def test_compacted_trace_keeps_lineage_and_flat_log_drops_it() -> None:
    G = traced_graph(deletion_loss)
    case = first_case(G)
    index = OperationIndex(G)
    compact = render_compacted_trace(G, case, index)
    flat = render_flat_log(G, case, index)
    forget = index.alias(op_named(G, "forget"))
    assert forget in compact and "mem:1@1" in compact and "ctx:q1@1" in compact
    assert forget in flat and "Caroline adopted Max in May 2023" in flat
    assert "@1" not in flat  # no variable ids: no edges
    assert "judge" not in compact and "judge" not in flat  # evaluations are not candidates


def test_render_limits_number_of_operations() -> None:
    G = traced_graph(many_questions)
    case = first_case(G)
    index = OperationIndex(G)
    assert "more operations not shown" in render_compacted_trace(G, case, index, max_ops=2)
    flat = render_flat_log(G, case, index, max_ops=3)
    assert flat.count("\nop") + 1 == 3
