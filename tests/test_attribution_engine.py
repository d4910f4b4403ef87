"""The engine contract the base class owns: one method to implement, timing, never raising, one
category -> error-type mapping, and verdicts on partial input that say what is missing."""

from __future__ import annotations

import networkx as nx
import pytest

from memtrace_otel.attribution import (
    Attribution,
    Engine,
    ErrorType,
    FailureCase,
    NotAttributed,
    create_engine,
)
from memtrace_otel.attribution.base import MISSING_TRACES_CONFIDENCE
from memtrace_otel.attribution.runner import attribute_failures, missing_traces
from memtrace_otel.graph import build_graph, clear_index, failed_evaluations
from memtrace_otel.semconv import Category
from memtrace_otel.spans.model import record_from_readable

from scenario import run_pipeline


class Blaming(Engine):
    """Blames the answer's producer, then optionally fails (a half-written verdict)."""

    name = "test-blaming"

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def _attribute(self, G: nx.DiGraph, case: FailureCase, result: Attribution) -> None:
        result.blame(G, next(iter(G.predecessors(case.answer))))
        result.confidence, result.input_tokens = 0.8, 42
        if self.error is not None:
            raise self.error


def graph_and_case(category: str = Category.GENERATION) -> tuple[nx.DiGraph, FailureCase]:
    G = nx.DiGraph()
    G.add_node("op:g", type="operation", category=category, order=0, name="answer", trace_id="t", span_id="g")
    G.add_node("answer@1", type="variable", name="answer", version=1, kind="answer")
    G.add_node("op:j", type="operation", category=Category.EVALUATION, order=1, passed=False,
               answer="answer@1")
    G.add_edges_from([("op:g", "answer@1"), ("answer@1", "op:j")])
    return G, FailureCase.from_graph(G, "op:j")


def test_subclasses_implement_one_method_and_get_a_timed_verdict() -> None:
    G, case = graph_and_case()
    result = Blaming().attribute(G, case)
    assert result.operation == "op:g" and result.engine == "test-blaming"
    assert result.error_type is ErrorType.RESPONSE  # from the category, by default
    assert result.failure_reason is None and result.seconds > 0 and result.missing_traces == []


@pytest.mark.parametrize(("error", "reason"), [
    (NotAttributed("no answer to follow"), "no answer to follow"),
    (KeyError("op:x"), "internal error: KeyError: 'op:x'"),
    (RecursionError("too deep"), "internal error: RecursionError: too deep"),
])
def test_a_raising_engine_gives_a_failed_attribution_without_the_half_verdict(error, reason) -> None:
    G, case = graph_and_case()
    result = Blaming(error).attribute(G, case)
    assert result.failure_reason == reason
    assert result.operation is None and result.error_type is None and result.confidence == 0.0
    assert result.input_tokens == 42  # what was spent is still reported


def test_attribute_is_the_template_method() -> None:
    assert Engine.attribute.__qualname__ == "Engine.attribute"
    assert all(type(create_engine(n)).attribute is Engine.attribute
               for n in ("lineage", "random-slice", "last-operation"))


def test_baselines_type_an_ingest_operation_as_extraction() -> None:
    # The one mapping (semconv.CATEGORY_ERROR_TYPE): ``ingest`` writes memory from messages.
    G, case = graph_and_case(Category.INGEST)
    result = create_engine("last-operation").attribute(G, case)
    assert result.operation == "op:g" and result.error_type is ErrorType.EXTRACTION


def test_random_slice_never_picks_an_ingest_operation() -> None:
    # Its candidate roles are those it was first measured with: ingest only records messages.
    G, case = graph_and_case(Category.INGEST)
    result = create_engine("random-slice").attribute(G, case)
    assert result.operation is None and "no blameable operation" in (result.failure_reason or "")


def _spans(provider, exporter):
    run_pipeline(provider)
    return [record_from_readable(span) for span in exporter.get_finished_spans()]


def test_a_lineage_into_traces_missing_from_the_input_is_named_and_lowers_confidence(
        tracer_provider, span_exporter) -> None:
    spans = _spans(tracer_provider, span_exporter)
    questions = {s.trace_id for s in spans if s.name.startswith("question")}
    maintenance = next(s.trace_id for s in spans if s.name == "maintenance")
    full = attribute_failures(build_graph(spans))
    assert [a.error_type for a in full] == [ErrorType.UPDATE] and full[0].missing_traces == []
    assert missing_traces(full) == set()

    G = build_graph([s for s in spans if s.trace_id in questions])
    partial = attribute_failures(G)
    # q1 read the unit the maintenance trace's update wrote; that trace is not in the input.
    assert [a.missing_traces for a in partial] == [[maintenance]]
    assert missing_traces(partial) == {maintenance}
    assert "1 trace(s) not in the input" in partial[0].explanation and maintenance in partial[0].explanation
    for node in G:  # the same input, its links to elsewhere forgotten: the engine's own confidence
        G.nodes[node].pop("missing_links", None)
    clear_index(G)
    unaware = create_engine("lineage").attribute(G, FailureCase.from_graph(G, failed_evaluations(G)[0]))
    assert unaware.missing_traces == [] and unaware.confidence > 0
    assert partial[0].confidence == round(unaware.confidence * MISSING_TRACES_CONFIDENCE, 3)
    assert partial[0].operation == unaware.operation
