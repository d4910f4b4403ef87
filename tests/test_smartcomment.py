"""smartcomment graphs (made by the real package, tests/fixtures/smartcomment/make_fixtures.py): import,
analysis, MemTraceBench scoring, bad input, OTLP export read back."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memtrace_bench.memtracebench import score_memtracebench
from memtrace_bench.score import summarize
from memtrace_otel.attribution.base import FailureCase, create_engine
from memtrace_otel.cli import main
from memtrace_otel.cli.import_cmd import post_otlp_json, smartcomment_spans
from memtrace_otel.collector.http_receiver import OTLPHttpReceiver
from memtrace_otel.exporters.otlp_json_file import encode_traces_data
from memtrace_otel.graph.build import build_graph
from memtrace_otel.graph.query import failed_evaluations
from memtrace_otel.semconv import ErrorType, MemTrace, SmartComment
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.spans.readers import read_span_files
from memtrace_otel.spans.smartcomment import NONE_OPERATION

FIXTURES = Path(__file__).parent / "fixtures" / "smartcomment"
GRAPHS = sorted(p for p in FIXTURES.iterdir() if p.name.endswith((".json", ".json.gz")))


def _source(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def _union(spans: list[Any], key: str) -> list[str]:
    return [value for span in spans for value in span.attributes.get(key, ())]


def _kept(spans: list[Any], data: dict[str, Any]) -> None:
    """Every operation, edge, variable version and annotation of ``data`` is on ``spans``, once."""
    ops = {s.attributes[SmartComment.OP_ID] for s in spans if SmartComment.OP_ID in s.attributes}
    assert ops >= {o["op_id"] for o in data["operations"] if o["op_id"] != NONE_OPERATION}
    edges = _union(spans, SmartComment.EDGE_IDS)
    assert sorted(edges) == sorted(e["edge_id"] for e in data["edges"])
    variables = _union(spans, SmartComment.VARIABLE_IDS)
    assert set(variables) == {n["full_node_id"] for n in data["nodes"]}
    cases = [s.attributes[MemTrace.EVALUATION_CASE] for s in spans
             if MemTrace.EVALUATION_CASE in s.attributes]
    assert sorted(cases) == sorted(a["query_id"] for a in data["annotations"])
    sessions = {s.attributes[SmartComment.SESSION_ID] for s in spans
                if SmartComment.SESSION_ID in s.attributes}
    assert sessions == {s["session_id"] for s in data["sessions"]}


def test_fixtures_hold_every_error_type_several_times() -> None:
    types = [a["final_error_type"] for path in GRAPHS for a in _source(path)["data"]["annotations"]]
    assert len(GRAPHS) >= 4 and any(p.suffix == ".gz" for p in GRAPHS)
    assert {t: types.count(t) >= 6 for t in ErrorType} == {t: True for t in ErrorType}


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: p.name)
def test_import_keeps_every_operation_edge_variable_and_annotation(path: Path) -> None:
    read = read_span_files([path])
    assert read.problems == []
    _kept(read.spans, _source(path)["data"])
    G = build_graph(read.spans)
    assert G.graph["problems"] == []
    data = _source(path)["data"]
    operations = [n for n, d in G.nodes(data=True) if d["type"] == "operation"]
    assert len(operations) == len([s for s in read.spans if SmartComment.OP_ID in s.attributes])
    assert len(failed_evaluations(G)) == len(data["annotations"])


def test_each_annotation_follows_its_own_answer_when_values_collide() -> None:
    # "I don't know." is one smartcomment node written by several generations: each verdict must
    # follow the copy made by the generation that read its own question.
    # The verdict sits on the file's own judge, which reads that copy (not on a stand-in annotation span
    # made because the judge read another generation's copy).
    G = build_graph(read_span_files(GRAPHS).spans)
    judges = {o["op_name"] for p in GRAPHS for o in _source(p)["data"]["operations"]
              if o["category"] == "evaluation"}
    answers = []
    for evaluation in failed_evaluations(G):
        case = FailureCase.from_graph(G, evaluation)
        assert case.answer is not None
        (writer,) = G.predecessors(case.answer)
        question_inputs = [G.nodes[v].get("content") for v in G.predecessors(writer)]
        assert case.question in question_inputs, (case.case_id, question_inputs)
        assert G.nodes[evaluation]["name"] in judges, case.case_id
        assert case.answer in set(G.predecessors(evaluation)), case.case_id
        answers.append(case.answer)
    assert any("~" in answer for answer in answers)  # not vacuous: some answers are later writers' copies


def test_score_reaches_the_target_per_error_type() -> None:
    results, problems = score_memtracebench([str(FIXTURES)], "lineage")
    assert problems == []
    summary = summarize(results, "lineage")
    assert summary["overall"]["cases"] == sum(len(_source(p)["data"]["annotations"]) for p in GRAPHS)
    per_type = {t: (r["type_accuracy"], r["operation_accuracy"]) for t, r in summary["by_error_type"].items()}
    print("lineage on smartcomment fixtures (type, operation):", per_type)
    assert set(per_type) == {t.value for t in ErrorType}
    assert summary["overall"]["operation_accuracy"] >= 0.96, per_type
    assert all(type_acc >= 0.85 and op_acc >= 0.85 for type_acc, op_acc in per_type.values()), per_type


def test_engines_never_read_the_gold_labels() -> None:
    spans = read_span_files(GRAPHS).spans
    with_labels = build_graph(spans)
    for span in spans:
        for key in (SmartComment.LABEL_ERROR_TYPE, SmartComment.LABEL_OP_ID, SmartComment.LABEL_SPAN_ID):
            span.attributes.pop(key, None)
    without = build_graph(spans)
    engine = create_engine("lineage")
    for evaluation in failed_evaluations(with_labels):
        a = engine.attribute(with_labels, FailureCase.from_graph(with_labels, evaluation))
        b = engine.attribute(without, FailureCase.from_graph(without, evaluation))
        assert (a.operation, a.error_type) == (b.operation, b.error_type)
    assert not any(isinstance(v, str) and "smartcomment.label" in k
                   for _, d in with_labels.nodes(data=True) for k, v in d.items())


def test_bench_score_cli_json_and_confusion() -> None:
    result = CliRunner().invoke(main, ["bench", "score", "--format", "memtracebench", str(FIXTURES),
                                       "--engine", "lineage", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["format"] == "memtracebench"
    diagonal = sum(summary["confusion"][t][t] for t in summary["confusion"] if t in summary["confusion"][t])
    assert diagonal / summary["overall"]["cases"] == summary["overall"]["type_accuracy"]


def test_analyze_runs_on_smartcomment_files_directly() -> None:
    result = CliRunner().invoke(main, ["analyze", "--json", *map(str, GRAPHS)])
    assert result.exit_code == 0, result.output
    failures = json.loads(result.stdout)["failures"]
    assert len(failures) == 40
    assert {f["error_type"] for f in failures} == {t.value for t in ErrorType}


def _write(path: Path, document: Any) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def _broken(tmp_path: Path) -> dict[str, str]:
    good = _source(GRAPHS[0])
    dangling = json.loads(json.dumps(good))
    dangling["data"]["edges"][0]["source_full_node_id"] = "msg:nowhere@1"
    unknown = json.loads(json.dumps(good))
    unknown["data"]["operations"][0]["category"] = "telepathy"
    no_op = json.loads(json.dumps(good))
    no_op["data"]["annotations"][0]["final_op_id"] = "op-does-not-exist"
    return {"not a smartcomment graph": _write(tmp_path / "other.json", {"data": {"things": []}}),
            "is not a node (dangling)": _write(tmp_path / "dangling.json", dangling),
            "'telepathy' (1 operation(s)) is not a known category":
                _write(tmp_path / "unknown.json", unknown),
            "final_op_id 'op-does-not-exist' names no operation": _write(tmp_path / "no_op.json", no_op)}


def test_bad_input_is_one_line_each_and_the_rest_is_imported(tmp_path: Path) -> None:
    files = _broken(tmp_path)
    for expected, path in files.items():
        read = read_span_files([path])
        lines = [str(p) for p in read.problems]
        assert len(lines) == 1 and expected in lines[0] and lines[0].startswith(path), lines
        if "dangling" in expected or "category" in expected or "final_op_id" in expected:
            assert len(read.spans) == len(read_span_files([GRAPHS[0]]).spans)
    for expected, path in files.items():  # one file per run: the broken copies share span ids
        for command in (["import", "smartcomment", path, "--out", str(tmp_path / "out.jsonl")],
                        ["analyze", path]):
            result = CliRunner().invoke(main, command)
            assert result.exit_code == 3, (command, result.output)
            assert "Traceback" not in result.output and expected in result.stderr, result.stderr


def test_import_cli_refuses_other_formats_and_needs_one_target(tmp_path: Path) -> None:
    otlp = tmp_path / "spans.jsonl"
    record = SpanRecord("ab" * 16, "cd" * 8, "app span", scope_name="app")
    otlp.write_text(json.dumps(encode_traces_data([record])) + "\n", encoding="utf-8")
    spans, problems = smartcomment_spans([str(otlp), str(GRAPHS[0])])
    assert [p.message for p in problems] == ["not a smartcomment graph (OTLP or Jaeger spans); skipped"]
    assert spans and all(s.service_name == "toymem-fixtures" for s in spans)
    assert CliRunner().invoke(main, ["import", "smartcomment", str(GRAPHS[0])]).exit_code == 2


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_otlp_file_reads_back_to_the_same_spans_and_scores(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"graphs{suffix}"
    result = CliRunner().invoke(main, ["import", "smartcomment", str(FIXTURES), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    direct = {(s.trace_id, s.span_id): s for s in read_span_files(GRAPHS).spans}
    back = read_span_files([out])
    assert back.problems == []
    assert {(s.trace_id, s.span_id): (s.name, s.parent_span_id, s.start_time_unix_nano, s.attributes)
            for s in back.spans} == {k: (s.name, s.parent_span_id, s.start_time_unix_nano, s.attributes)
                                     for k, s in direct.items()}
    for path in GRAPHS:
        _kept([s for s in back.spans if s.attributes.get(SmartComment.GRAPH_ID) == _source(path)["graph_id"]],
              _source(path)["data"])
    results, _ = score_memtracebench([str(out)], "lineage")
    assert len(results) == 40 and summarize(results, "x")["overall"]["operation_accuracy"] >= 0.96


def test_endpoint_export_reaches_a_real_otlp_http_receiver() -> None:
    received: list[Any] = []
    lock = threading.Lock()

    def ingest(spans: list[Any], _size: int) -> bool:
        with lock:
            received.extend(spans)
        return True

    receiver = OTLPHttpReceiver(ingest, port=0, store_bodies=False)
    receiver.start()
    try:
        host, port = receiver.address
        spans, problems = smartcomment_spans([str(p) for p in GRAPHS])
        assert problems == []
        assert post_otlp_json(spans, f"http://{host}:{port}") >= 1
        result = CliRunner().invoke(main, ["import", "smartcomment", str(GRAPHS[0]), "--endpoint",
                                           f"http://{host}:{port}/v1/traces"])
        assert result.exit_code == 0, result.output
    finally:
        receiver.stop()
    first = read_span_files([GRAPHS[0]]).spans
    assert len(received) == len(spans) + len(first)
    assert {(s.trace_id, s.span_id) for s in received} == {(s.trace_id, s.span_id) for s in spans}
    assert {s.span_id: s.attributes for s in received} == {s.span_id: s.attributes for s in spans}


def test_endpoint_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["import", "smartcomment", str(GRAPHS[0]), "--endpoint",
                                       "http://127.0.0.1:9/"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output and "127.0.0.1:9" in result.output


def test_a_repr_list_of_strings_decodes_as_the_python_literal_would_and_nothing_else_does() -> None:
    """``decode_value`` reads MemBase's ``repr``-encoded fact lists without evaluating anything: for
    every list of strings ``repr`` can write (quotes, backslashes, control and non-ASCII characters),
    the JSON it gives is the literal's; anything that is not only string literals is kept as it is."""
    import ast
    import random

    from memtrace_otel.spans.smartcomment import decode_value

    rnd = random.Random(7)
    alphabet = "ab '\"\\\n\t\x00\x7fé€😀,[]"
    for _ in range(5000):
        items = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 8)))
                 for _ in range(rnd.randint(1, 4))]
        value = repr(items)
        assert decode_value(value) == json.dumps(ast.literal_eval(value), ensure_ascii=False), value
    for kept in ("['a', 3]", "[b'x']", "['a'] + ['b']", "['unterminated]", "[1, 2]", "['a' 'b']"):
        assert decode_value(kept) == kept


def test_a_repr_record_decodes_as_the_python_literal_would_and_nothing_else_does() -> None:
    """An app that traces its memory units as dicts gets them ``repr``-encoded: a flat record of string
    keys to strings, numbers and constants reads as the same record in JSON (so its text field is what it
    says); JSON is kept as written, and anything with a nested or unknown value is kept as it is."""
    import ast
    import random

    from memtrace_otel.spans.smartcomment import decode_value

    rnd = random.Random(11)
    alphabet = "ab '\"\\\n\t\x00\x7fé€😀,:{}"
    scalars = [True, False, None, 0, -3, 12, 2.5, -0.25]
    for _ in range(3000):
        record = {"".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 6))):
                  ("".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 8))) if rnd.random() < 0.7
                   else rnd.choice(scalars)) for _ in range(rnd.randint(1, 4))}
        value = repr(record)
        assert decode_value(value) == json.dumps(ast.literal_eval(value), ensure_ascii=False), value
    for kept in ('{"id": "m1", "text": "Ann"}', "{'id': ['m1']}", "{'a': {'b': 'c'}}", "{1: 'a'}",
                 "{'a': b'x'}", "{'a': 1e-05}", "{'a'}", "{'a': 'b'", "{}"):
        assert decode_value(kept) == kept


def _toy_graph(context: list[str], error_type: str, blamed: str) -> dict[str, Any]:
    """A smartcomment graph as the real package writes an app that keeps its memory units as dicts
    (``{'id': 'm3', 'text': ...}``, ``repr``-encoded): three messages each extracted into a unit (the
    second garbled), then one question: a retrieval reading the units and writing ``context`` (their
    texts, as a list), an answer, a judge, and the annotation naming ``blamed`` and ``error_type``."""
    common = {"graph_id": "graph-toy", "user_id": None, "project_id": "toy", "metadata": {},
              "filename": "app.py", "lineno": 1, "trigger_point": "app.py:1", "comment": None}
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    operations: list[dict[str, Any]] = []
    clock = iter(range(10, 60))

    def node(name: str, value: str, category: str, session: str, class_name: str | None = None) -> str:
        nodes.append({**common, "created_at": f"2026-11-23 06:14:{next(clock):02d}.000", "name": name,
                      "version": 1, "value": value, "category": category, "class_name": class_name,
                      "session_id": session, "full_name": name, "node_id": f"{name}@1",
                      "full_node_id": f"{name}@1"})
        return f"{name}@1"

    def op(name: str, category: str, session: str, inputs: list[str], outputs: list[str]) -> None:
        op_id = f"op-{len(operations):02d}"
        at = f"2026-11-23 06:14:{next(clock):02d}.000"
        operations.append({**common, "created_at": at, "op_id": op_id, "op_name": name, "category": category,
                           "session_id": session})
        edges.extend({**common, "created_at": at, "edge_id": f"edge-{op_id}-{i}-{o}", "op_id": op_id,
                      "category": category, "session_id": session, "source_full_node_id": i,
                      "target_full_node_id": o} for i in inputs for o in outputs)

    said = ["Alice: I adopted a dog named Rex last spring.", "Alice: My favourite food is ramen.",
            "Alice: My birthday is on March 14."]
    stored = ["Alice: I adopted a dog named Rex last spring.", "Alice: Alice mentioned a favourite food.",
              "Alice: My birthday is on March 14."]
    units = []
    for n, (message, unit) in enumerate(zip(said, stored, strict=True), 1):
        msg = node(f"msg:D1:{n}", repr(message), "message", "s-ingest", "msg")
        units.append(node(f"memory:m{n}", repr({"id": f"m{n}", "text": unit}), "memory_unit", "s-ingest",
                          "memory"))
        op("toymem.extract", "extraction", "s-ingest", [msg], [units[-1]])
    question = "When is Alice's birthday?"
    query = node("str:q", repr(question), "query", "s-qa")
    listed = node("list:ctx", repr(context), "context", "s-qa")
    op("toymem.retrieve", "retrieval", "s-qa", [query, *units], [listed])
    answer = node("str:a", repr("It is ramen."), "answer", "s-qa")
    op("toymem.answer", "generation", "s-qa", [query, listed], [answer])
    gold = node("str:g", repr("March 14"), "gold", "s-qa")
    verdict = node("dict:v", repr({"question": question, "correct": False}), "verdict", "s-qa")
    op("toymem.judge", "evaluation", "s-qa", [answer, gold], [verdict])
    sessions = [{**common, "created_at": "2026-11-23 06:14:00.000", "session_id": s, "session_name": s,
                 "category": category} for s, category in (("s-ingest", "ingest"), ("s-qa", "qa"))]
    final = next(o["op_id"] for o in operations if o["op_name"] == blamed)
    annotation = {"query_id": "alice-q1", "query": question, "golden_answers": ["March 14"],
                  "prediction": "It is ramen.", "source_evidence_ids": ["D1:3"],
                  "final_error_type": error_type, "final_op_id": final}
    return {"graph_id": "graph-toy", "user_id": None, "project_id": "toy", "storage_path": None,
            "strict": False, "driver_type": "in_memory", "created_at": "2026-11-23 06:14:00.000",
            "metadata": {}, "data": {"nodes": nodes, "edges": edges, "operations": operations,
                                     "sessions": sessions, "annotations": [annotation]}}


@pytest.mark.parametrize(("context", "blamed", "error_type"), [
    # The retrieval handed the birthday's unit on by its text (not its record): the reader had it.
    (["Alice: Alice mentioned a favourite food.", "Alice: My birthday is on March 14."],
     "toymem.answer", ErrorType.RESPONSE),
    # It left the unit out: the retrieval lost the fact.
    (["Alice: Alice mentioned a favourite food.", "Alice: I adopted a dog named Rex last spring."],
     "toymem.retrieve", ErrorType.RETRIEVAL),
])
def test_a_retrieval_that_handed_a_dict_units_text_on_passed_it_on(
        tmp_path: Path, context: list[str], blamed: str, error_type: ErrorType) -> None:
    """The retrieval's output lists the units' texts; the units themselves are ``repr``-encoded dicts
    whose id and keys a retriever never hands on. Whether the retrieval passed the evidence's unit on is
    judged by what the unit says, so a reader that had it and answered wrong is to blame."""
    path = _write(tmp_path / "toy.json", _toy_graph(context, error_type.value, blamed))
    read = read_span_files([path])
    assert read.problems == []
    G = build_graph(read.spans)
    (evaluation,) = failed_evaluations(G)
    verdict = create_engine("lineage").attribute(G, FailureCase.from_graph(G, evaluation))
    assert verdict.operation is not None
    assert (G.nodes[verdict.operation]["name"], verdict.error_type) == (blamed, error_type)
