"""The MemBase-vocabulary part: graphs as MemBase writes them, labels right by construction."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memtrace_bench.membase import build as membase
from memtrace_bench.membase.build import MembaseConfig, build_membase, plan_faults, verify_faults
from memtrace_bench.membase.common import carries
from memtrace_bench.membase.data import load
from memtrace_bench.memtracebench import labelled_cases, score_memtracebench
from memtrace_otel.cli import main
from memtrace_otel.spans.readers import read_span_files
from memtrace_otel.spans.smartcomment import decode_value
from memtrace_otel.text import readable

# What MemBase names the operation a fault of each type happens in, per system (op_name, category).
EXPECTED: dict[str, dict[str, Any]] = {
    "Mem0": {"ExtractionError": ("memory_system.extract_facts", "extraction"),
             "UpdateError": ("memory_system.update_memory_decision", "update"),
             "DeletionError": ("memory_system.update_memory_decision", "update"),
             "RetrievalError": ("memory_system.search_vector_store", "retrieval"),
             "ResponseError": ("question-answering", "evaluation")},
    "Long-Context": {"ExtractionError": ("memory_system.memory_update", "update"),
                     "UpdateError": ("memory_system.memory_update", "update"),
                     "ResponseError": ("question-answering", "evaluation")},
    "NaiveRAG": {"ExtractionError": ("memory_system.message_buffer_update", "update"),
                 "RetrievalError": ("memory_system.retrieve", "retrieval"),
                 "ResponseError": ("question-answering", "evaluation")},
    "EverMemOS": {"ExtractionError": {("memory_system.extract_memory", "extraction"),
                                      ("evermemos.boundary_detection", "boundary_detection")},
                  "RetrievalError": {("memory_system.agentic_round1_bundle", "retrieval"),
                                     ("memory_system.agentic_final_rerank", "retrieval")},
                  "ResponseError": ("question-answering", "evaluation")},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, locomo: str) -> Path:
    out = tmp_path_factory.mktemp("membase")
    build_membase(MembaseConfig(out=str(out), conversations=["30"], per_type=2, jobs=1))
    return out


def _graphs(directory: Path) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def test_same_seed_same_files_other_seed_other_faults(built: Path, tmp_path: Path) -> None:
    build_membase(MembaseConfig(out=str(tmp_path / "again"), conversations=["30"], per_type=2,
                                systems=["Mem0", "EverMemOS"], jobs=2))  # in worker processes
    for name in ("Mem0-30.json", "EverMemOS-30.json"):
        assert (built / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
    build_membase(MembaseConfig(out=str(tmp_path / "other"), seed=1, conversations=["30"], per_type=2,
                                systems=["Mem0"]))
    labels = [(a["query_id"], a["final_error_type"])
              for a in json.loads((tmp_path / "other" / "Mem0-30.json").read_text())["data"]["annotations"]]
    assert labels != [(a["query_id"], a["final_error_type"])
                      for a in _graphs(built)["Mem0-30.json"]["data"]["annotations"]]


def test_every_system_and_type_is_labelled_and_the_importer_reads_every_file(built: Path) -> None:
    graphs = _graphs(built)
    assert sorted(graphs) == ["EverMemOS-30.json", "Long-Context-30.json", "Mem0-30.json", "NaiveRAG-30.json"]
    for name, document in graphs.items():
        read = read_span_files([str(built / name)])
        assert read.problems == [], (name, [str(p) for p in read.problems[:3]])
        cases = list(labelled_cases(read.spans))
        notes = document["data"]["annotations"]
        assert len(cases) == len(notes) > 0
        system = document["project_id"]
        assert {n["final_error_type"] for n in notes} == set(EXPECTED[system]), name
        assert all(label["span_id"] for _, label in cases), name  # each gold op became a span


def test_each_label_names_an_operation_of_the_kind_membase_would_give_it(built: Path) -> None:
    for document in _graphs(built).values():
        data = document["data"]
        expected = EXPECTED[document["project_id"]]
        ops = {op["op_id"]: op for op in data["operations"]}
        writes: dict[str, list[str]] = {}
        for edge in data["edges"]:
            writes.setdefault(edge["op_id"], []).append(edge["target_full_node_id"])
        messages = {n["name"] for n in data["nodes"] if n["category"] == "message"}
        for note in data["annotations"]:
            op = ops[note["final_op_id"]]
            allowed = expected[note["final_error_type"]]
            assert (op["op_name"], op["category"]) in (allowed if isinstance(allowed, set) else {allowed})
            assert set(note["source_evidence_ids"]) <= messages, note["query_id"]
            if note["final_error_type"] == "DeletionError":
                assert any(t.startswith("delete_marker:") for t in writes[op["op_id"]])
            if note["final_error_type"] == "UpdateError":  # it wrote a new version of a memory unit
                assert any(t.startswith("memory-unit") and not t.endswith("@1") for t in writes[op["op_id"]])
            assert note["prediction"] != note["golden_answers"][0]


def test_removing_a_fault_restores_its_answer_and_each_fault_alone_is_its_cause(locomo: str) -> None:
    for system in membase.SYSTEMS.values():
        conversation = load("41", system.MAX_SESSIONS)
        seed = f"test/{system.NAME}"
        clean = membase._run(system, conversation, [], seed)
        faults = verify_faults(system, conversation, plan_faults(system, conversation, clean, seed, 2), seed)
        assert {f.error_type for f in faults} == set(system.TYPES), system.NAME
        together = membase._run(system, conversation, faults, seed)
        answers = {q.qid: q.answer for q in conversation.questions}
        for fault in faults:
            assert not carries(fault.text, answers[fault.question]), fault  # a lossy fault loses the answer
            assert clean.passed[fault.question]
            assert not together.passed[fault.question]
            assert fault in together.fired
            without = membase._run(system, conversation, [f for f in faults if f != fault], seed)
            assert without.passed[fault.question], (system.NAME, fault)


def test_scored_through_the_importer(built: Path) -> None:
    results, problems = score_memtracebench([str(built)], "last-operation")
    assert problems == []
    assert len(results) == sum(len(d["data"]["annotations"]) for d in _graphs(built).values())
    assert all(r.problem is None for r in results)


def test_missing_data_is_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["bench", "membase", "--out", str(tmp_path / "o"), "--locomo",
                                  str(tmp_path / "none")])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [f"Error: LoCoMo directory not found: {tmp_path / 'none'}"]
    result = runner.invoke(main, ["bench", "membase", "--out", str(tmp_path / "o"), "--system", "Letta"])
    assert result.exit_code == 1 and "unknown MemBase system 'Letta'" in result.output


def test_the_importer_reads_membase_s_categories_and_kinds() -> None:
    """MemBase's own vocabulary: memory entries are memory units, the prediction an answer (its class name),
    LLM responses responses, refined queries queries, and EverMemOS's operation categories are known (no
    problem line)."""
    from memtrace_bench.membase.graph import Graph, content_identity
    from memtrace_otel.graph.build import build_graph
    from memtrace_otel.spans.smartcomment import records_from_smartcomment

    g = Graph(seed="kinds", project_id="EverMemOS", user_id="u")
    g.session("memory_construction", "one")
    message = g.variable('{"content": "Caroline went to a support group."}', identity="U1:D1:3",
                         category="message")
    cell = g.variable("{}", identity="cell", category="temporary_variable", class_name="temporary_variable")
    g.op([message], [cell], op_name="evermemos.boundary_detection", category="boundary_detection")
    unit = g.variable('{"episode": "Caroline went to a support group."}', identity="memory-unit-1",
                      category="memory_entry")
    g.op([cell], [unit], op_name="memory_system.finalize_memory_unit", category="initialization")
    query = g.variable(repr("Where did Caroline go?"), identity="q1", category="message & query",
                       class_name="query")
    g.scope("question-answering", "evaluation")
    context = g.variable(repr("Caroline went to a support group."), identity=content_identity("c"),
                         category="memory_context", class_name="context")
    g.op([unit], [context])
    answer = g.variable(repr("a support group"), identity=content_identity("a"), category="llm_response",
                        class_name="prediction")
    raw = g.variable(repr("raw"), identity=content_identity("r"), category="llm_response",
                     class_name="raw_episode_extraction_response")
    g.op([query, context], [answer, raw])
    g.end_scope()
    facts = g.variable(repr(["Caroline went to a support group."]), identity="facts", category="llm_response",
                       class_name="extracted_facts")
    g.op([message], [facts], op_name="memory_system.extract_facts", category="extraction")
    g.scope("memory_system.agentic_round2_bundle", "retrieval")
    refined = g.variable(repr(["Where did Caroline go?"]), identity="Where did Caroline go?",
                         category="refined_queries", class_name="refined_queries")
    g.op([query], [refined])
    g.end_scope()
    problems: list[Any] = []
    graph = build_graph(list(records_from_smartcomment(g.export(), "kinds.json:1", problems)))
    assert problems == []
    kinds = {graph.nodes[n].get("name", "").rsplit("/", 1)[-1]: graph.nodes[n].get("kind") for n in graph
             if graph.nodes[n].get("type") == "variable"}
    assert kinds["memory-unit-1"] == "memory_unit"
    assert kinds["query:q1"] == "query"
    assert kinds[f"context:{content_identity('c')}"] == "context"
    assert kinds[f"prediction:{content_identity('a')}"] == "answer"
    assert kinds[f"raw_episode_extraction_response:{content_identity('r')}"] == "response"
    assert kinds["temporary_variable:cell"] == "other" and kinds["U1:D1:3"] == "message"
    # a list of facts (``repr``) reads as its statements: its short brackets are no "[date]" header
    facts_node = next(n for n in graph if graph.nodes[n].get("name", "").endswith("extracted_facts:facts"))
    assert graph.nodes[facts_node]["content"] == '["Caroline went to a support group."]'
    assert readable(graph.nodes[facts_node]["content"]) == "Caroline went to a support group."
    # an agentic search's rewrite of the question says the question, not a fact: a query
    assert kinds["refined_queries:Where did Caroline go?"] == "query"
    categories = {graph.nodes[n].get("name"): graph.nodes[n].get("category") for n in graph
                  if graph.nodes[n].get("type") == "operation"}
    assert categories["evermemos.boundary_detection"] == "extraction"
    assert categories["memory_system.finalize_memory_unit"] == "ingest"


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _text(node: dict[str, Any]) -> str:
    """A node's value as plain words, whether it is JSON (MemBase's encoding) or a ``repr``."""
    try:
        return _norm(json.dumps(json.loads(node["value"]), ensure_ascii=False))
    except ValueError:
        return _norm(decode_value(node["value"]))


def test_each_label_is_right_in_the_graph_s_own_content(built: Path) -> None:
    """Read off the written graph, not the generator: the labelled operation is where the evidence's words
    were lost, or where a store that held them was not returned, or where a context that held them was
    misread."""
    for document in _graphs(built).values():
        system, data = document["project_id"], document["data"]
        conversation = load("30", membase.SYSTEMS[system].MAX_SESSIONS)
        turns = {t.message_id: t for t in conversation.turns}
        nodes = {n["full_node_id"]: n for n in data["nodes"]}
        edges: dict[str, list[dict[str, Any]]] = {}
        for edge in data["edges"]:
            edges.setdefault(edge["op_id"], []).append(edge)
        for note in data["annotations"]:
            # what each evidence turn says in memory: Mem0 and EverMemOS keep the observations, the others
            # the message itself; a fault is aimed at one of the turns, a misread context holds them all
            said = [[_norm(f.text) for f in turns[e].facts] if system in ("Mem0", "EverMemOS")
                    else [_norm(turns[e].text)] for e in note["source_evidence_ids"]]

            def holds(node_id: str, words: list[str], nodes: dict[str, Any] = nodes) -> bool:
                return any(w in _text(nodes[node_id]) for w in words)

            mine = edges[note["final_op_id"]]
            sources = {e["source_full_node_id"] for e in mine}
            targets = {e["target_full_node_id"] for e in mine}
            kind, case = note["final_error_type"], note["query_id"]
            if kind == "ResponseError":
                contexts = [c for c in sources if c.startswith("context:")]
                assert all(any(holds(c, words) for c in contexts) for words in said), case
            elif kind == "DeletionError":
                deleted = [e["source_full_node_id"] for e in mine
                           if e["target_full_node_id"].startswith("delete_marker:")]
                assert any(holds(d, words) for d in deleted for words in said), case
            elif kind == "UpdateError":  # a version that held it, and the next that does not
                versions = [e for e in mine if e["source_full_node_id"].startswith("memory-unit")]
                assert any(holds(e["source_full_node_id"], words)
                           and not holds(e["target_full_node_id"], words)
                           for e in versions for words in said), case
            elif kind == "RetrievalError":  # a memory unit that held it, and not returned
                returned = {nodes[t]["full_name"] for t in targets if t in nodes}
                units = [i for i, n in nodes.items() if n["category"] == "memory_entry"]
                assert any((held := {nodes[i]["full_name"] for i in units if holds(i, words)})
                           and not held & returned for words in said), case
            else:  # ExtractionError: what the operation wrote into memory does not hold it
                written = [t for t in targets if t.startswith("extracted_facts:")
                           or nodes[t]["category"] in ("memory_entry", "temporary_variable")]
                assert written and any(not any(holds(t, words) for t in written) for words in said), case
