"""The reference memory systems: LoCoMo loading, offline steps, traced runs with cross-trace lineage."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memtrace_bench.locomo import QA, Session, Turn, conversation_ids
from memtrace_bench.systems import SYSTEMS, TracedRun, load_conversation, offline_components
from memtrace_bench.systems.interfaces import ContextItem, MemoryEvent, Sentence, SimilarMemory
from memtrace_bench.systems.offline import (
    ExtractiveAnswerer,
    F1Judge,
    LexicalEmbedder,
    RuleDecider,
    RuleExtractor,
    load_wordllama,
)
from memtrace_otel.graph.build import build_graph
from memtrace_otel.graph.query import evaluations, operations, producer_of
from memtrace_otel.semconv import (
    MEMORY_OPERATIONS,
    Category,
    GenAI,
    GenAIOperation,
    GenAIRecord,
    MemTrace,
    VariableKind,
)
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.wire import parse_descriptor


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
    extraction = RuleExtractor().extract(turn)
    assert [f.text for f in extraction.facts] == ["I started a pottery class last week."]
    assert extraction.model is None and extraction.input_tokens == 0  # an offline step calls no model


def test_embedders_give_unit_vectors_and_wordllama_loads_offline() -> None:
    vectors = LexicalEmbedder().embed(["pottery class", "pottery classes", "hiking"])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    if load_wordllama() is None:
        pytest.skip("wordllama is not installed (a dependency of the benchmark, benchmarks/pyproject.toml)")
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
    # The first question-time retrieval (mem0-style also searches at ingest time).
    asked = {G.nodes[n]["trace_id"] for n in judged}
    retrieval = next(op for op in operations(G, category="retrieval") if G.nodes[op]["trace_id"] in asked)
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


def test_rule_decider_adds_updates_deletes_and_ignores_duplicates() -> None:
    decider = RuleDecider()
    fact = Sentence("D2:1", "Ann", "9 May 2023", "I no longer paint.")

    def similar(score: float, sentences: int = 1) -> list[SimilarMemory]:
        return [SimilarMemory("mem:1", (fact,) * sentences, score)]

    assert decider.decide(fact, []).event is MemoryEvent.ADD
    assert decider.decide(fact, similar(0.2)).event is MemoryEvent.ADD
    assert decider.decide(fact, similar(0.8)).event is MemoryEvent.NONE
    assert (decider.decide(fact, similar(0.5)).event, decider.decide(fact, similar(0.5)).target) == (
        MemoryEvent.DELETE, "mem:1")
    plain = Sentence("D2:1", "Ann", "9 May 2023", "I paint sunsets.")
    assert decider.decide(plain, similar(0.5)).event is MemoryEvent.UPDATE
    assert decider.decide(plain, similar(0.5, sentences=3)).event is MemoryEvent.ADD
    with pytest.raises(ValueError):
        RuleDecider(duplicate=0.2, related=0.5)


def test_mem0_style_traces_its_ingest_search_and_every_decision_even_none() -> None:
    texts = ["I adopted a dog named Rex.", "I adopted a dog named Rex.", "I no longer have my dog Rex.",
             "My dog Rex loves the park."]
    turns = [Turn(f"D1:{i}", "Ann", text, 1, "8 May 2023") for i, text in enumerate(texts, 1)]
    run = TracedRun(5, "mem0")
    system = SYSTEMS["mem0-style"](run.tracer, offline_components(embedder="lexical"))
    system.ingest_session(Session(1, "8 May 2023", turns))
    records = run.sink.drain()
    run.close()
    named = [(r.attributes[MemTrace.OPERATION_NAME], r) for r in records]
    decided = [r for name, r in named if name == "mem0.decide"]
    assert [r.attributes[MemTrace.OPERATION_OUTCOME] for r in decided] == ["add", "none", "delete", "update"]
    searches = [r for name, r in named if name == "mem0.find_similar"]
    assert len(searches) == 4
    assert all(r.attributes[MemTrace.OPERATION_CATEGORY] == Category.RETRIEVAL for r in searches)
    effects = [name for name, _ in named if name in ("mem0.add", "mem0.update", "mem0.delete")]
    assert effects == ["mem0.add", "mem0.delete", "mem0.add", "mem0.update"]
    G = build_graph(records)
    none = [n for n in operations(G) if G.nodes[n]["name"] == "mem0.decide"][1]
    assert [G.nodes[v]["content"].split()[0] for v in G.successors(none)] == ["NONE"]
    # The decision read the search's result and the facts; it stays off the answers' lineage.
    decide = [n for n in operations(G) if G.nodes[n]["name"] == "mem0.decide"][3]
    assert sorted(G.nodes[v]["name"].split(":")[0] for v in G.predecessors(decide)) == ["facts", "similar"]
    searched = next(v for v in G.predecessors(decide) if G.nodes[v]["name"].startswith("similar:"))
    assert G.nodes[searched]["content"].startswith("mem:2 ")  # the unit the UPDATE merged into


def _records(span: SpanRecord) -> list[dict[str, object]]:
    """The records a retrieval span says it returned (content capture is on in a TracedRun)."""
    memory = span.attributes.get(GenAI.OPERATION_NAME) in MEMORY_OPERATIONS
    return json.loads(span.attributes[GenAI.MEMORY_RECORDS if memory else GenAI.RETRIEVAL_DOCUMENTS])


_TOP_K = {"rag.retrieve": 5, "mem0.search": 5, "episodic.retrieve": 12, "episodic.rerank": 4}
_DATA_SOURCE = {"rag.retrieve": "rag", "lc.assemble_context": "long-context"}


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_retrieval_spans_say_what_they_returned(locomo: str, name: str) -> None:
    conversation = load_conversation("26", locomo).truncated(2)
    run = TracedRun(11, name)
    system = SYSTEMS[name](run.tracer, offline_components(embedder="lexical"))
    for session in conversation.sessions:
        system.ingest_session(session)
    outcomes = {o.trace_id: o for o in (system.ask(q, f"case-{q.index}") for q in conversation.questions[:3])}
    spans = run.sink.drain()
    run.close()
    asked = [s for s in spans if s.trace_id in outcomes
             and s.attributes[MemTrace.OPERATION_CATEGORY] in (Category.RETRIEVAL, Category.RERANK)]
    assert asked
    for span in asked:
        op, outcome = span.attributes[MemTrace.OPERATION_NAME], outcomes[span.trace_id]
        records = _records(span)
        assert span.attributes[GenAI.MEMORY_RECORD_COUNT] == len(records) > 0, op
        named = span.attributes.get(GenAI.MEMORY_RECORD_ID)
        assert named == (records[0][GenAIRecord.ID] if len(records) == 1 else None), op
        assert span.attributes.get(GenAI.RETRIEVAL_TOP_K) == _TOP_K.get(op), op
        assert span.attributes.get(GenAI.DATA_SOURCE_ID) == _DATA_SOURCE.get(op), op
        query = span.attributes.get(GenAI.MEMORY_QUERY_TEXT, span.attributes.get(GenAI.RETRIEVAL_QUERY_TEXT))
        assert query == outcome.question
        scores = [r.get(GenAIRecord.SCORE) for r in records]
        if op == "lc.assemble_context":
            assert set(scores) == {None}  # the window is in recency order, unscored
        else:
            assert scores == sorted(scores, reverse=True), op
        if f"context:{outcome.case_id}@1" in span.attributes.get(MemTrace.OUTPUTS, ()):
            assert [r[GenAIRecord.ID] for r in records] == outcome.context_units  # the final stage
    # Offline steps call no model: no model or token usage on any span.
    assert not any(k in s.attributes for s in spans for k in (GenAI.REQUEST_MODEL, GenAI.USAGE_INPUT_TOKENS))


_CHANGES = {GenAIOperation.CREATE_MEMORY, GenAIOperation.UPDATE_MEMORY, GenAIOperation.DELETE_MEMORY}


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_memory_change_spans_count_the_units_they_wrote(locomo: str, name: str) -> None:
    run = TracedRun(13, name)
    system = SYSTEMS[name](run.tracer, offline_components(embedder="lexical"))
    # Eight sessions: enough for long-context to trim several units in one operation.
    for session in load_conversation("26", locomo).truncated(8).sessions:
        system.ingest_session(session)
    spans = [s for s in run.sink.drain() if s.attributes.get(GenAI.OPERATION_NAME) in _CHANGES]
    run.close()
    assert spans
    for span in spans:
        kinds = {d.id: d.kind for d in map(parse_descriptor, span.attributes.get(MemTrace.VARIABLES, ()))}
        units = list(dict.fromkeys(i.rsplit("@", 1)[0] for i in span.attributes.get(MemTrace.OUTPUTS, ())
                                   if kinds[i] == VariableKind.MEMORY_UNIT))
        assert span.attributes.get(GenAI.MEMORY_RECORD_COUNT, 0) == len(units), span.name
        assert span.attributes.get(GenAI.MEMORY_RECORD_ID) == (units[0] if len(units) == 1 else None)


def test_a_retrieval_of_one_record_names_it_in_its_records() -> None:
    """A search never carries ``gen_ai.memory.record.id`` (docs/conventions.md: its records are in
    ``gen_ai.memory.records``), even when it found one record."""
    turns = [Turn(f"D1:{i}", "Ann", text, 1, "8 May 2023")
             for i, text in enumerate(["I adopted a dog named Rex.", "He loves the park."], 1)]
    run = TracedRun(17, "rag")
    system = SYSTEMS["rag"](run.tracer, offline_components(embedder="lexical"))
    system.ingest_session(Session(1, "8 May 2023", turns))
    system.ask(QA(0, "What is Ann's dog called?", "Rex", ("D1:1",), 4), "case-0")
    (span,) = [s for s in run.sink.drain() if s.attributes[MemTrace.OPERATION_NAME] == "rag.retrieve"]
    run.close()
    (unit,) = system.state.units
    assert span.attributes[GenAI.MEMORY_RECORD_COUNT] == 1 and GenAI.MEMORY_RECORD_ID not in span.attributes
    assert [r[GenAIRecord.ID] for r in _records(span)] == [unit]
