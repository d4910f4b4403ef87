"""The reference memory systems: LoCoMo loading, offline steps, traced runs with cross-trace lineage."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memtrace_otel.graph.build import build_graph
from memtrace_otel.graph.query import evaluations, operations, producer_of
from memtrace_otel.systems import SYSTEMS, TracedRun, load_conversation, offline_components
from memtrace_otel.systems.interfaces import ContextItem, Sentence
from memtrace_otel.systems.locomo import Turn, conversation_ids
from memtrace_otel.systems.offline import (
    ExtractiveAnswerer,
    F1Judge,
    LexicalEmbedder,
    RuleExtractor,
    load_wordllama,
)


def test_loader_reads_sessions_questions_and_splits_bad_evidence(locomo: str) -> None:
    assert "26" in conversation_ids(locomo)
    conversation = load_conversation("26", locomo)
    assert conversation.sessions[0].turns[0].dia_id == "D1:1"
    assert conversation.sessions[0].date == "8 May 2023"
    assert all(all(e.startswith("D") and ":" in e for e in q.evidence) for q in conversation.questions)
    short = conversation.truncated(2)
    present = {t.dia_id for s in short.sessions for t in s.turns}
    assert len(short.sessions) == 2 and short.questions
    assert all(set(q.evidence) <= present for q in short.questions)


def test_loader_names_a_broken_file(tmp_path) -> None:
    (tmp_path / "x.json").write_text("{broken")
    with pytest.raises(ValueError, match=r"x\.json: not JSON"):
        load_conversation("x", str(tmp_path))


def test_extractive_answerer_reads_the_matching_sentence_and_the_judge_scores_it() -> None:
    context = [
        ContextItem("u1", [Sentence("D1:1", "Ann", "8 May 2023", "I adopted a dog named Rex.")]),
        ContextItem("u2", [Sentence("D1:2", "Bob", "9 May 2023", "I went hiking with my sister.")]),
    ]
    result = ExtractiveAnswerer().answer("What is the name of Ann's dog?", context)
    assert result.unit == "u1" and "rex" in result.text.lower()
    when = ExtractiveAnswerer().answer("When did Bob go hiking?", context)
    assert when.text == "9 May 2023"
    judge = F1Judge(0.5)
    assert judge.judge("q", "Rex", "Rex").passed
    assert not judge.judge("q", "hiking", "Rex").passed


def test_rule_extractor_drops_questions_and_chatter() -> None:
    turn = Turn("D1:1", "Ann", "Hey! How are you? I started a pottery class last week.", 1, "8 May 2023")
    facts = RuleExtractor().extract(turn)
    assert [f.text for f in facts] == ["I started a pottery class last week."]


def test_embedders_give_unit_vectors_and_wordllama_loads_offline() -> None:
    vectors = LexicalEmbedder().embed(["pottery class", "pottery classes", "hiking"])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    if load_wordllama() is None:
        pytest.skip("wordllama is not installed (the [embeddings] extra)")
    assert offline_components().embedder.name.startswith("wordllama")


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_system_traces_lineage_across_ingestion_and_question_traces(locomo: str, name: str) -> None:
    conversation = load_conversation("26", locomo).truncated(3)
    run = TracedRun(7, name)
    system = SYSTEMS[name](run.tracer, offline_components(embedder="lexical"))
    for session in conversation.sessions:
        system.ingest_session(session)
    outcomes = [system.ask(q, f"case-{q.index}") for q in conversation.questions[:6]]
    G = build_graph(run.sink.drain())
    run.close()
    judged = evaluations(G)
    assert {G.nodes[n]["case"] for n in judged} == {o.case_id for o in outcomes}
    assert all(G.nodes[n]["question"] and G.nodes[n]["evidence"] for n in judged)
    retrieval = operations(G, category="retrieval")[0]
    units = [v for v in G.predecessors(retrieval) if G.nodes[v].get("kind") == "memory_unit"]
    assert units, "retrieval read no memory unit"
    writer = producer_of(G, units[0])
    assert writer is not None and G.nodes[writer]["trace_id"] != G.nodes[retrieval]["trace_id"]
    assert G.nodes[units[0]]["content"], "content capture is on: contents must be in the spans"


def test_spans_carry_lineage_metadata_and_deterministic_ids(locomo: str) -> None:
    conversation = load_conversation("26", locomo).truncated(1)
    ids = []
    for _ in range(2):
        run = TracedRun(3, "rag")
        system = SYSTEMS["rag"](run.tracer, offline_components(embedder="lexical"))
        system.ingest_session(conversation.sessions[0])
        ids.append([(r.trace_id, r.span_id) for r in run.sink.drain()])
        unit = next(iter(system.state.units.values()))
        assert json.dumps(unit.metadata).count("memtrace_traceparent") == 1
        run.close()
    assert ids[0] == ids[1]
