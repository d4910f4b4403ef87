"""``analyze`` on an app that reuses its variable names across traces (issue 24, item 9).

A long-running app writes ``msg:D1:1``, ``query:q1`` ... again for every conversation, so each
name gets one version per conversation and version edges chain thousands of traces. Two
per-failure questions used to walk that whole chain: the evidence id ``D1:1`` resolved to the
earliest version (the first conversation's message, whose descendants are every later
conversation), and the traces missing from a failure's lineage were searched over all its
ancestors. The speed target (200k spans <= 60 s) lives in
``benchmarks/performance/analyze_scale.py --workload repeated``; these tests check the mechanisms:
each failure is judged on its own conversation, and the graph-wide lookups answer what the
per-failure searches answered.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import networkx as nx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel import MemoryTracer
from memtrace_otel.attribution.runner import attribute_failures
from memtrace_otel.graph import build_graph
from memtrace_otel.graph.index import missing_by_node
from memtrace_otel.graph.query import evidence_variables, missing_lineage
from memtrace_otel.spans.model import record_from_readable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import offline_memory_agent as example  # the example is a script, not a package

_RUNS = 3


def _repeated_graph(runs: int) -> nx.DiGraph:
    """The offline example run ``runs`` times in one process: same names, one tracer."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = MemoryTracer(provider, capture_content=True)
    app_tracer = provider.get_tracer("test")
    for _ in range(runs):
        memory = example.TinyMemory(tracer, app_tracer)
        for number, session in enumerate(example.SESSIONS, start=1):
            with app_tracer.start_as_current_span(f"session {number}"):
                for dia_id, text in session:
                    memory.ingest(dia_id, text)
        for case_id, question, gold, evidence in example.QUESTIONS:
            memory.answer(case_id, question, gold, evidence)
    provider.shutdown()
    return build_graph(record_from_readable(span) for span in exporter.get_finished_spans())


@pytest.fixture(scope="module")
def repeated() -> nx.DiGraph:
    return _repeated_graph(_RUNS)


def _run_of(G: nx.DiGraph, node: str) -> int:
    """Which repetition wrote ``node``: the version of its message names, counted from 1."""
    if G.nodes[node].get("type") == "variable":
        return int(G.nodes[node]["version"])
    messages = [v for v in nx.ancestors(G, node) if str(G.nodes[v].get("name", "")).startswith("msg:")]
    return max(int(G.nodes[v]["version"]) for v in messages)


def test_the_names_really_repeat(repeated: nx.DiGraph) -> None:
    assert [repeated.nodes[f"msg:D1:1@{k}"]["name"] for k in range(1, _RUNS + 1)] == ["msg:D1:1"] * _RUNS
    assert repeated.has_edge("msg:D1:1@1", "msg:D1:1@2")  # the version chain across traces


def test_evidence_is_the_message_of_the_failures_own_conversation(repeated: nx.DiGraph) -> None:
    evaluations = [n for n, d in repeated.nodes(data=True) if d.get("passed") is False]
    assert len(evaluations) == 6 * _RUNS
    for evaluation in evaluations:
        data = repeated.nodes[evaluation]
        found = evidence_variables(repeated, data["evidence"], at=evaluation)
        assert found and all(_run_of(repeated, v) == _run_of(repeated, evaluation) for v in found), found
        # Without an evaluation, the earliest version, as before (messages written once).
        assert all(repeated.nodes[v]["version"] == 1 for v in evidence_variables(repeated, data["evidence"]))


def test_names_written_once_resolve_as_before() -> None:
    G = _repeated_graph(1)
    for evaluation in (n for n, d in G.nodes(data=True) if d.get("passed") is False):
        ids = G.nodes[evaluation]["evidence"]
        assert evidence_variables(G, ids, at=evaluation) == evidence_variables(G, ids)


def test_each_repetition_gets_its_own_verdicts(repeated: nx.DiGraph) -> None:
    """Every conversation fails the same way: its verdicts blame its own operations, with the same
    error types and reasons as the first conversation's (the old code blamed the first
    conversation's operations for every later failure)."""
    verdicts = attribute_failures(repeated, "lineage")
    assert len(verdicts) == 6 * _RUNS
    by_run: dict[int, list[tuple[str, str | None, str]]] = {}
    for verdict in verdicts:
        run = _run_of(repeated, verdict.case.evaluation)
        assert verdict.operation is not None and verdict.failure_reason is None
        assert _run_of(repeated, verdict.operation) == run, (verdict.case.case_id, verdict.operation)
        error_type = verdict.error_type.value if verdict.error_type else None
        by_run.setdefault(run, []).append((verdict.case.case_id, error_type,
                                           repeated.nodes[verdict.operation]["name"]))
    assert by_run[1] == by_run[2] == by_run[3]


def _missing_by_search(G: nx.DiGraph, node: str) -> set[str]:
    missing = set(G.nodes[node].get("missing_links") or ())
    for ancestor in nx.ancestors(G, node):
        missing.update(G.nodes[ancestor].get("missing_links") or ())
    return missing


@pytest.mark.parametrize("seed", range(5))
def test_missing_lineage_table_answers_what_the_search_did(seed: int) -> None:
    rng = random.Random(seed)
    G = nx.gnp_random_graph(60, 0.06, seed=seed, directed=True)
    G = nx.DiGraph((u, v) for u, v in G.edges if u < v)  # a DAG, as build_graph makes
    G.add_nodes_from(range(60))
    G = nx.relabel_nodes(G, {n: f"n{n}" for n in G})
    for node in rng.sample(sorted(G), 6):
        G.nodes[node]["missing_links"] = sorted(rng.sample(["t1", "t2", "t3", "t4"], rng.randint(1, 2)))
    for node in G:
        assert missing_lineage(G, node) == _missing_by_search(G, node), node


def test_missing_lineage_with_a_cycle_still_searches() -> None:
    G = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "b")])
    G.nodes["a"]["missing_links"] = ["t1"]
    assert missing_by_node(G) is None
    assert missing_lineage(G, "c") == {"t1"}
    G.nodes["c"]["missing_links"] = ["t2"]  # edited in place: the lookup is not cached for cycles
    assert missing_lineage(G, "b") == {"t1", "t2"}
