"""Attribution without content (ranked candidates, ambiguity), `bench score --content`, and weak signals."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
from click.testing import CliRunner

from memtrace_bench.build import build, quick_config
from memtrace_bench.score import GraphCache, load_labels
from memtrace_otel.attribution.base import Attribution, Candidate, ErrorType, FailureCase, create_engine
from memtrace_otel.attribution.evidence import find_evidence
from memtrace_otel.cli import main
from memtrace_otel.semconv import Category, EvaluationSignal, VariableKind


class _Graph:
    """A small evolution graph written by hand, in the builder's node and edge shape."""

    def __init__(self) -> None:
        self.G = nx.DiGraph()
        self.order = 0

    def var(self, vid: str, kind: str, size: int, *, content: str | None = None,
            deleted: bool = False) -> str:
        name, version = vid.rsplit("@", 1)
        self.G.add_node(vid, type="variable", name=name, version=int(version), kind=kind, hash=f"h{vid}",
                        size=size, content=content, deleted=deleted)
        if int(version) > 1:
            self.G.add_edge(f"{name}@{int(version) - 1}", vid, role="version")
        return vid

    def op(self, name: str, category: str, inputs: list[str], outputs: list[str], *, trace: str = "t1",
           **data: object) -> str:
        self.order += 1
        node = f"op:{trace}:{self.order:016x}"
        self.G.add_node(node, type="operation", name=name, category=category, trace_id=trace,
                        span_id=f"{self.order:016x}", order=self.order, **data)
        self.G.add_edges_from(((v, node) for v in inputs), role="input")
        self.G.add_edges_from(((node, v) for v in outputs), role="output")
        return node

    def question(self, inputs: list[str], *, question: str = "What did Ann adopt?",
                 gold: str | None = "a dog", evidence: tuple[str, ...] = ("D1:1",)) -> tuple[str, str]:
        """A question trace: query, retrieval of ``inputs``, generation, failed evaluation."""
        query = self.var("query:q@1", VariableKind.QUERY, 20)
        self.op("sys.query", Category.INGEST, [], [query], trace="tq")
        context = self.var("context:q@1", VariableKind.CONTEXT, 300)
        retrieval = self.op("sys.retrieve", Category.RETRIEVAL, [query, *inputs], [context], trace="tq")
        answer = self.var("answer:q@1", VariableKind.ANSWER, 10)
        self.op("sys.generate", Category.GENERATION, [query, context], [answer], trace="tq")
        evaluation = self.op("sys.evaluate", Category.EVALUATION, [answer], [], trace="tq", passed=False,
                             question=question, prediction="a cat", gold=gold, evidence=list(evidence),
                             answer=answer, signal=EvaluationSignal.GOLD)
        return retrieval, evaluation


def _memory(g: _Graph, messages: int = 6) -> list[str]:
    """Messages msg:D1:i, each extracted into unit:i by a peer `sys.extract` (same size behaviour)."""
    units = []
    for i in range(1, messages + 1):
        message = g.var(f"msg:D1:{i}@1", VariableKind.MESSAGE, 100 + 10 * i)
        units.append(g.var(f"unit:{i}@1", VariableKind.MEMORY_UNIT, 90 + 10 * i))
        g.op("sys.extract", Category.EXTRACTION, [message], [units[-1]])
    return units


def _attribute(G: nx.DiGraph, evaluation: str) -> Attribution:
    return create_engine("lineage").attribute(G, FailureCase.from_graph(G, evaluation))


def test_a_tombstone_of_the_evidences_unit_heads_the_candidates_without_content() -> None:
    g = _Graph()
    units = _memory(g)
    deleted = g.var("unit:1@2", VariableKind.MEMORY_UNIT, 0, deleted=True)
    delete = g.op("sys.delete", Category.DELETION, [units[0]], [deleted])
    _, evaluation = g.question(units[1:4])
    result = _attribute(g.G, evaluation)
    assert result.operation == delete and result.error_type is ErrorType.DELETION
    assert result.candidates[0].operation == delete
    assert all(isinstance(c, Candidate) for c in result.candidates)
    assert 0 < result.confidence < 0.5  # no content: never stated with the confidence content gives
    assert "content not captured" in result.explanation


def test_a_shrinking_update_is_blamed_when_its_peers_never_shrink_a_unit() -> None:
    g = _Graph()
    units = _memory(g)
    for i, unit in enumerate(units[1:], 2):  # the update's peers merge, and grow their unit
        g.op("sys.update", Category.UPDATE, [unit], [g.var(f"unit:{i}@2", VariableKind.MEMORY_UNIT, 400)])
    shrunk = g.var("unit:1@2", VariableKind.MEMORY_UNIT, 40)
    update = g.op("sys.update", Category.UPDATE, [units[0]], [shrunk])
    _, evaluation = g.question([shrunk, "unit:2@2"])
    result = _attribute(g.G, evaluation)
    assert (result.operation, result.error_type) == (update, ErrorType.UPDATE)
    # The unit still reached the context: the generation stays a candidate, ranked below.
    ranked = [c.operation for c in result.candidates]
    generation = next(n for n in g.G if g.G.nodes[n].get("name") == "sys.generate")
    assert ranked.index(update) < ranked.index(generation)


def test_evidence_pointing_two_ways_is_flagged_ambiguous_and_json_carries_every_candidate() -> None:
    g = _Graph()
    units = _memory(g)
    retrieval, evaluation = g.question([units[1], units[3]], evidence=("D1:1", "D1:2"))
    result = _attribute(g.G, evaluation)
    operations = {c.operation for c in result.candidates}
    generation = next(n for n in g.G if g.G.nodes[n].get("name") == "sys.generate")
    # D1:1's unit was in memory and not retrieved; D1:2's reached the context.
    assert {retrieval, generation} <= operations
    assert result.ambiguous
    confidences = [c.confidence for c in result.candidates[1:]]
    assert confidences == sorted(confidences, reverse=True)
    data = json.loads(json.dumps(result.to_dict()))
    assert len(data["candidates"]) == len(result.candidates) >= 2
    assert {c["error_type"] for c in data["candidates"]} >= {"RetrievalError", "ResponseError"}


def test_a_clear_case_with_content_is_not_ambiguous_and_other_engines_give_one_candidate() -> None:
    g = _Graph()
    units = _memory(g)
    for node in g.G:
        if g.G.nodes[node].get("type") == "variable":
            evidence = node in ("msg:D1:1@1", "unit:1@1")
            g.G.nodes[node]["content"] = "Ann adopted a dog" if evidence else "weather"
    _, evaluation = g.question(units[1:3])
    result = _attribute(g.G, evaluation)
    assert result.error_type is ErrorType.RETRIEVAL and not result.ambiguous
    last = create_engine("last-operation").attribute(g.G, FailureCase.from_graph(g.G, evaluation))
    assert [c.operation for c in last.candidates] == [last.operation]


def test_a_when_question_without_gold_takes_a_message_that_can_state_a_time() -> None:
    g = _Graph()
    chat = g.var("msg:D1:1@1", VariableKind.MESSAGE, 60,
                 content="[1 May 2023] Ann: The beach trip with Ann's beach friends at the beach was fun")
    dated = g.var("msg:D1:2@1", VariableKind.MESSAGE, 60,
                  content="[1 May 2023] Ann: I went to the beach last week")
    filler = [g.var(f"msg:D1:{i}@1", VariableKind.MESSAGE, 40, content=f"[1 May 2023] Bob: lunch number {i}")
              for i in range(3, 8)]
    g.op("sys.ingest", Category.INGEST, [chat, dated, *filler], [])
    case = FailureCase("op:x", question="When did Ann go to the beach trip?", prediction="1 May 2023",
                       signal=EvaluationSignal.JUDGE)
    found, given = find_evidence(g.G, case, use_embeddings=False)
    assert (found, given) == ([dated], False)
    case.question = "What did Ann do at the beach trip?"  # no answer type: the plain ranking stands
    assert find_evidence(g.G, case, use_embeddings=False)[0] == [chat]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory, locomo: str) -> Path:
    out = tmp_path_factory.mktemp("bench")
    build(quick_config(str(out)))
    return out


def test_content_conditions_strip_or_refer_at_read_time(quick: Path, tmp_path: Path) -> None:
    labels, _ = load_labels(str(quick), limit=1)
    spans = labels[0]["spans"]
    on = GraphCache(str(quick)).get(spans)[0]
    off = GraphCache(str(quick), content="off").get(spans)[0]
    ref = GraphCache(str(quick), content="ref", store_dir=str(tmp_path / "store")).get(spans)[0]
    contents = {n: d.get("content") for n, d in on.nodes(data=True) if d.get("type") == "variable"}
    assert any(contents.values())
    assert not any(d.get("content") for _, d in off.nodes(data=True) if d.get("type") == "variable")
    assert {n: ref.nodes[n].get("content") for n in contents} == contents
    assert any((tmp_path / "store").rglob("*"))  # the contents really went through the side store
    with pytest.raises(ValueError, match="content"):
        GraphCache(str(quick), content="maybe")


def test_cli_score_reports_top_k_under_each_content_condition(quick: Path) -> None:
    runner, scores = CliRunner(), {}
    for content in ("on", "off", "ref"):
        done = runner.invoke(main, ["bench", "score", "--engine", "lineage", str(quick), "--content", content,
                                    "--json"])
        assert done.exit_code == 0, done.output
        scores[content] = json.loads(done.stdout)
        overall = scores[content]["overall"]
        assert scores[content]["content"] == content and scores[content]["top_k"] == 3
        assert overall["top_k_operation_accuracy"] >= overall["operation_accuracy"]
        assert all(c["top_k_correct"] or not c["operation_correct"] for c in scores[content]["cases"])
    assert scores["ref"]["overall"] == scores["on"]["overall"] | {
        k: scores["ref"]["overall"][k] for k in ("seconds_per_case",)}
    assert scores["off"]["overall"]["operation_accuracy"] < scores["on"]["overall"]["operation_accuracy"]
    table = runner.invoke(main, ["bench", "score", "--engine", "lineage", str(quick), "--content", "off"])
    assert "top-3 op" in table.stdout and "content off" in table.stdout
    bad = runner.invoke(main, ["bench", "score", "--engine", "lineage", str(quick), "--content", "nope"])
    assert bad.exit_code == 2
