"""Fuzz the graph builder and the exporters: any attribute value, of any type, on any key the builder
reads is a problem line at worst, never a traceback, and spans nobody touched are still built."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtrace_otel.graph import build_graph, evaluations, evidence_variables, failed_evaluations
from memtrace_otel.graph.export import FORMATS, write_graph
from memtrace_otel.semconv import GenAI, MemTrace, MemTraceEvent, MemTraceStep
from memtrace_otel.spans.model import SpanEvent, SpanRecord

KEYS = [MemTrace.OPERATION_CATEGORY, MemTrace.OPERATION_NAME, MemTrace.OPERATION_OUTCOME, MemTrace.INPUTS,
        MemTrace.OUTPUTS, MemTrace.VARIABLES, MemTrace.VARIABLE_CONTENTS, MemTrace.DELETED,
        MemTrace.EVALUATION_PASSED, MemTrace.EVALUATION_SCORE, MemTrace.EVALUATION_SIGNAL,
        MemTrace.EVALUATION_QUESTION, MemTrace.EVALUATION_PREDICTION, MemTrace.EVALUATION_GOLD,
        MemTrace.EVALUATION_EXPLANATION, MemTrace.EVALUATION_EVIDENCE, MemTrace.EVALUATION_ANSWER,
        MemTrace.EVALUATION_CASE, GenAI.OPERATION_NAME, GenAI.MEMORY_STORE_ID]
STEP_KEYS = [MemTraceStep.NAME, MemTraceStep.INPUTS, MemTraceStep.OUTPUTS]

_texts = st.one_of(
    st.sampled_from(["x", "x@1", "mem:1@2", "@1", "y@notanint", "x@01", "x@\u00b2", "x@" + "9" * 40,
                     "facts 3 ab x@1", "facts \u00b2 ab x@1", "true", "false", "evaluation", "update",
                     "gold", "\x1b[2J", "a\"b\\c\n", ""]),
    st.text(max_size=30),
)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), _texts)
_values = st.one_of(_scalars, st.lists(_scalars, max_size=4),
                    st.dictionaries(st.text(max_size=5), _scalars, max_size=3))


def _base() -> list[SpanRecord]:
    """A valid pipeline: extract -> update -> retrieve -> generate -> judge (failed)."""
    rows = [
        ("extraction", ["msg:D1:1@1"], ["mem:1@1"], {}),
        ("update", ["mem:1@1"], ["mem:1@2"], {}),
        ("retrieval", ["mem:1@2", "q@1"], ["ctx@1"], {}),
        ("generation", ["ctx@1"], ["answer@1"], {}),
        ("evaluation", ["answer@1"], [], {MemTrace.EVALUATION_PASSED: False, MemTrace.EVALUATION_SCORE: 0.0,
                                          MemTrace.EVALUATION_EVIDENCE: ["D1:1"],
                                          MemTrace.EVALUATION_ANSWER: "answer@1"}),
    ]
    return [SpanRecord("ab" * 16, f"{i + 1:016x}", category, start_time_unix_nano=i,
                       source=f"f.jsonl:{i + 1}",
                       attributes={MemTrace.OPERATION_CATEGORY: category, MemTrace.INPUTS: inputs,
                                   MemTrace.OUTPUTS: outputs, **more})
            for i, (category, inputs, outputs, more) in enumerate(rows)]


_mutation = st.tuples(st.integers(0, 4), st.sampled_from(KEYS + STEP_KEYS), _values)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_mutation, min_size=1, max_size=4))
def test_any_value_on_any_key_is_at_worst_a_problem(mutations) -> None:
    spans = _base()
    touched = set()
    for index, key, value in mutations:
        span = spans[index]
        touched.add(span.span_id)
        if key in STEP_KEYS:
            span.events.append(SpanEvent(MemTraceEvent.STEP, 0, {key: value}))
        else:
            span.attributes[key] = value
    G = build_graph(spans)
    assert nx.is_directed_acyclic_graph(G)
    for span in spans:
        if span.span_id not in touched:
            assert f"op:{span.trace_id}:{span.span_id}" in G
    sources = {span.source for span in spans if span.span_id in touched}
    for problem in G.graph["problems"]:  # about a touched span (a duplicate version names both)
        assert (problem.where in sources or "lineage cycle" in problem.message
                or any(span_id in problem.message for span_id in touched)), problem
    for node in failed_evaluations(G):
        assert G.nodes[node]["passed"] is False
    assert len(evaluations(G)) <= 1
    evidence_variables(G, ["D1:1"])
    for fmt in FORMATS:
        text = write_graph(G, fmt)
        text.encode("utf-8")  # no lone surrogate reaches the output
        if fmt == "graphml":
            ET.parse(io.BytesIO(text.encode("utf-8")))
