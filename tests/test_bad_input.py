"""Bad span files: one clear line naming file, line and problem; the rest is still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from memtrace_otel.cli import main
from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.exporters.otlp_json_file import encode_traces_data
from memtrace_otel.graph import (
    build_graph,
    evaluations,
    failed_evaluations,
    lineage_path,
    producer_of,
)
from memtrace_otel.spans import SpanRecord, read_span_files
from memtrace_otel.spans.otlp_json import MAX_ATTRIBUTE_CHARS
from memtrace_otel.wire import parse_variable_id

from graph_compare import otlp_line
from scenario import run_pipeline


@pytest.fixture
def good_lines(tmp_path) -> list[str]:
    path = tmp_path / "good.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    run_pipeline(provider)
    provider.shutdown()
    return path.read_text().splitlines()


def _span_line(trace_id: str, span_id: str, **attributes: object) -> str:
    record = SpanRecord(trace_id, span_id, "op", attributes={"memtrace.operation.category": "other",
                                                             **attributes})
    return json.dumps(encode_traces_data([record]))


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


BAD_LINES = {
    "invalid JSON": "{not json",
    "no resourceSpans": '{"foo": 1}',
    "resourceSpans entry is not an object": '{"resourceSpans": [42]}',
    "span is not an object": '{"resourceSpans": [{"scopeSpans": [{"spans": ["x"]}]}]}',
    "is not 32 hex chars": _span_line("nothex", "b" * 16),
    "all zeros": _span_line("0" * 32, "b" * 16),
}


@pytest.mark.parametrize("expected", sorted(BAD_LINES))
def test_each_bad_line_is_reported_and_the_rest_read(tmp_path, good_lines, expected) -> None:
    lines = [*good_lines[:3], BAD_LINES[expected], *good_lines[3:]]
    path = _write(tmp_path, lines)
    result = read_span_files([path])
    assert len(result.spans) == len(good_lines)  # every good span survived
    (problem,) = result.problems
    assert problem.where == f"{path}:4" and expected in problem.message

    runner = CliRunner()
    outcome = runner.invoke(main, ["inspect", str(path)])
    assert outcome.exit_code == 3, outcome.output
    assert f"{path}:4" in outcome.stderr and "Traceback" not in outcome.output
    strict = runner.invoke(main, ["inspect", "--strict", str(path)])
    assert strict.exit_code == 1 and "--strict" in strict.stderr


def test_truncated_last_line(tmp_path, good_lines) -> None:
    path = _write(tmp_path, [*good_lines[:-1], good_lines[-1][: len(good_lines[-1]) // 2]])
    result = read_span_files([path])
    assert len(result.problems) == 1 and "invalid JSON" in result.problems[0].message
    assert result.problems[0].where.endswith(f":{len(good_lines)}")
    assert len(result.spans) >= len(good_lines) - 1


def test_duplicate_spans_are_kept_once(tmp_path, good_lines) -> None:
    path = _write(tmp_path, [*good_lines, good_lines[0]])
    result = read_span_files([path])
    assert sum("duplicate span" in p.message for p in result.problems) >= 1
    assert len({(s.trace_id, s.span_id) for s in result.spans}) == len(result.spans)


def test_lineage_cycle_is_cut_and_reported(tmp_path) -> None:
    path = _write(tmp_path, [
        _span_line("a" * 32, "1" * 16, **{"memtrace.inputs": ["x@1"], "memtrace.outputs": ["y@1"]}),
        _span_line("a" * 32, "2" * 16, **{"memtrace.inputs": ["y@1"], "memtrace.outputs": ["x@1"]}),
    ])
    G = build_graph(read_span_files([path]).spans)
    (problem,) = G.graph["problems"]
    assert "lineage cycle" in problem.message and problem.where.startswith(str(path))
    import networkx as nx

    assert nx.is_directed_acyclic_graph(G)
    assert CliRunner().invoke(main, ["graph", str(path)]).exit_code == 3


def test_huge_attribute_is_truncated_not_fatal(tmp_path, good_lines) -> None:
    huge = _span_line("c" * 32, "d" * 16, **{"memtrace.output.contents": ["x" * 10_000_000],
                                             "memtrace.outputs": ["big@1"], "note": "y" * 10_000_000})
    path = _write(tmp_path, [huge, *good_lines])
    result = read_span_files([path])
    assert len(result.spans) == len(good_lines) + 1
    big = next(s for s in result.spans if s.span_id == "d" * 16)
    assert len(big.attributes["note"]) == MAX_ATTRIBUTE_CHARS
    assert {p.where for p in result.problems} == {f"{path}:1"}


def test_wrong_types_inside_a_span_are_reported(tmp_path) -> None:
    path = _write(tmp_path, [_span_line("a" * 32, "1" * 16, **{"memtrace.inputs": "not-a-list"})])
    G = build_graph(read_span_files([path]).spans)
    assert any("memtrace.inputs is a str, not a list" in p.message for p in G.graph["problems"])


def test_missing_file_and_directory_arguments(tmp_path) -> None:
    runner = CliRunner()
    outcome = runner.invoke(main, ["inspect", str(tmp_path / "nope.jsonl")])
    assert outcome.exit_code == 1 and "no such file" in outcome.stderr
    (tmp_path / "empty").mkdir()
    empty = runner.invoke(main, ["inspect", str(tmp_path / "empty")])
    assert empty.exit_code == 3 and "no span files" in empty.stderr  # issue 8.2: said, not silent


def test_jaeger_json_document(tmp_path) -> None:
    # The shape of Jaeger's /api/traces and UI download, arrays turned into JSON strings.
    document = {"data": [{"traceID": "ab" * 16, "processes": {"p1": {"serviceName": "svc"}}, "spans": [
        {"traceID": "ab" * 16, "spanID": "cd" * 8, "operationName": "search_memory s", "processID": "p1",
         "startTime": 1_700_000_000_000_000, "duration": 5, "references": [
             {"refType": "FOLLOWS_FROM", "traceID": "ef" * 16, "spanID": "12" * 8}],
         "tags": [{"key": "memtrace.operation.category", "type": "string", "value": "retrieval"},
                  {"key": "memtrace.inputs", "type": "string", "value": '["mem:1@1"]'},
                  {"key": "memtrace.input.sizes", "type": "string", "value": "[4]"},
                  {"key": "memtrace.input.producers", "type": "string",
                   "value": '["00-' + "ef" * 16 + "-" + "12" * 8 + '-01"]'},
                  {"key": "otel.status_code", "type": "string", "value": "ERROR"},
                  {"key": "memtrace.evaluation.prediction", "type": "string", "value": "[1, 2]"}],
         "logs": [{"timestamp": 1_700_000_000_000_001, "fields": [
             {"key": "event", "type": "string", "value": "memtrace.step"}]}]},
        {"traceID": "ab" * 16, "spanID": "zz", "operationName": "bad"}]}]}
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps(document, indent=2))
    result = read_span_files([path])
    (span,) = result.spans
    assert span.attributes["memtrace.inputs"] == ["mem:1@1"] and span.status_code == "ERROR"
    assert span.attributes["memtrace.evaluation.prediction"] == "[1, 2]"  # a string stays a string
    assert span.service_name == "svc" and span.links[0].trace_id == "ef" * 16
    assert span.start_time_unix_nano == 1_700_000_000_000_000_000
    assert [e.name for e in span.events] == ["memtrace.step"]
    (problem,) = result.problems
    assert "'bad' skipped" in problem.message
    G = build_graph(result.spans)
    assert G.graph["missing_traces"] == {"ef" * 16}


# -- graph builder: every value it reads is type-checked where it is read (issue 8.1, 8.2, 7.9) -------

_CATEGORY, _INPUTS, _OUTPUTS = "memtrace.operation.category", "memtrace.inputs", "memtrace.outputs"
_VARIABLES = "memtrace.variables"
_GOOD = [  # a small pipeline: message -> memory unit -> answer; its lineage must survive any bad span
    ("1" * 16, {_CATEGORY: "extraction", _INPUTS: ["msg:D1:1@1"], _OUTPUTS: ["mem:1@1"],
                _VARIABLES: ["message 5 aa msg:D1:1@1", "memory_unit 5 bb mem:1@1"]}),
    ("2" * 16, {_CATEGORY: "generation", _INPUTS: ["mem:1@1"], _OUTPUTS: ["answer:q@1"],
                _VARIABLES: ["answer 5 cc answer:q@1"]}),
]
_BAD_ID = "3" * 16
_EVALUATION = {_CATEGORY: "evaluation", _INPUTS: ["answer:q@1"], "memtrace.evaluation.passed": False,
               "memtrace.evaluation.evidence": ["D1:1"], "memtrace.evaluation.score": 0.0,
               "memtrace.evaluation.answer": "answer:q@1", "memtrace.evaluation.case": "q"}
_STEP = "memtrace.step"

# (key the problem names, attributes changed on the evaluation span, events)
BAD_VALUES = {
    "evidence as an int": ("memtrace.evaluation.evidence", {"memtrace.evaluation.evidence": 5}, []),
    "evidence with an int element": ("memtrace.evaluation.evidence",
                                     {"memtrace.evaluation.evidence": ["D1:1", 7]}, []),
    "version with a non-ASCII digit": (_OUTPUTS, {_OUTPUTS: ["x@\u00b2"]}, []),
    "version of 5,000 digits": (_OUTPUTS, {_OUTPUTS: ["x@" + "1" * 5000]}, []),
    "descriptor size with a non-ASCII digit": (_VARIABLES, {_VARIABLES: ["facts \u00b2 ab x@1"]}, []),
    "descriptor size of 5,000 digits": (_VARIABLES, {_VARIABLES: ["facts " + "9" * 5000 + " ab x@1"]}, []),
    "descriptor of an int": (_VARIABLES, {_VARIABLES: [5]}, []),
    "descriptor kind unknown": (_VARIABLES, {_VARIABLES: ["wombat 1 ab x@1"], _OUTPUTS: ["x@1"]}, []),
    "step inputs as an int": ("memtrace.step.inputs", {},
                              [{"name": _STEP, "attributes": {"memtrace.step.inputs": 5}}]),
    "step name as a list": ("memtrace.step.name", {},
                            [{"name": _STEP, "attributes": {"memtrace.step.name": ["a"]}}]),
    "score as a string": ("memtrace.evaluation.score", {"memtrace.evaluation.score": "0.5"}, []),
    "passed as the string false": ("memtrace.evaluation.passed", {"memtrace.evaluation.passed": "false"}, []),
    "passed as an int": ("memtrace.evaluation.passed", {"memtrace.evaluation.passed": 0}, []),
    "category as an int": (_CATEGORY, {_CATEGORY: 3}, []),
    "category unknown": (_CATEGORY, {_CATEGORY: "bogus"}, []),
    "input id without version": (_INPUTS, {_INPUTS: ["answer:q@1", "x"]}, []),
    "input id with a word as version": (_INPUTS, {_INPUTS: ["answer:q@1", "y@notanint"]}, []),
    "input id without name": (_INPUTS, {_INPUTS: ["answer:q@1", "@1"]}, []),
    "input id with a leading zero": (_INPUTS, {_INPUTS: ["answer:q@1", "x@01"]}, []),
    "input id of version 0": (_INPUTS, {_INPUTS: ["answer:q@1", "x@0"]}, []),
    "inputs as an int": (_INPUTS, {_INPUTS: 5}, []),
    "deleted id malformed": ("memtrace.deleted", {"memtrace.deleted": ["gone"]}, []),
    "operation name as a list": ("memtrace.operation.name", {"memtrace.operation.name": ["judge"]}, []),
    "outcome as an int": ("memtrace.operation.outcome", {"memtrace.operation.outcome": 1}, []),
    "store id as an int": ("gen_ai.memory.store.id", {"gen_ai.memory.store.id": 1}, []),
    "GenAI operation as an int": ("gen_ai.operation.name", {"gen_ai.operation.name": 1}, []),
    "signal unknown": ("memtrace.evaluation.signal", {"memtrace.evaluation.signal": "vibes"}, []),
    "answer id malformed": ("memtrace.evaluation.answer", {"memtrace.evaluation.answer": "answer"}, []),
    "case as an int": ("memtrace.evaluation.case", {"memtrace.evaluation.case": 12}, []),
    "gold as a list": ("memtrace.evaluation.gold", {"memtrace.evaluation.gold": ["Paris"]}, []),
    "contents not a list": ("memtrace.variable.contents", {_VARIABLES: ["facts 1 ab x@1"],
                                                           "memtrace.variable.contents": 5}, []),
}


def _graph_file(tmp_path: Path, attributes: dict[str, object], events: list[dict[str, object]]) -> Path:
    lines = [otlp_line(span_id, attrs, start=i) for i, (span_id, attrs) in enumerate(_GOOD)]
    lines.append(otlp_line(_BAD_ID, {**_EVALUATION, **attributes}, start=9, events=events))
    return _write(tmp_path, lines)


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_each_bad_value_is_one_problem_and_nothing_else_is_lost(tmp_path, case) -> None:
    key, attributes, events = BAD_VALUES[case]
    path = _graph_file(tmp_path, attributes, events)
    result = read_span_files([path])
    G = build_graph(result.spans)
    problems = [*result.problems, *G.graph["problems"]]
    assert len(problems) == 1, problems
    (problem,) = problems
    assert problem.where == f"{path}:3" and _BAD_ID in problem.message and key in problem.message
    assert lineage_path(G, "msg:D1:1@1", "answer:q@1")  # the good spans are whole
    assert G.nodes["mem:1@1"]["kind"] == "memory_unit" and G.nodes["answer:q@1"]["kind"] == "answer"
    judge = f"op:{'ab' * 16}:{_BAD_ID}"
    assert judge in G  # the bad span keeps what was good in it
    assert "answer:q@1" in G.pred[judge] or not isinstance(attributes.get(_INPUTS, []), list)
    assert all("@" in n and parse_variable_id(n) for n in G if not n.startswith("op:"))


def test_wrong_values_keep_the_graph_safe_for_tables(tmp_path) -> None:
    G = build_graph(read_span_files([_graph_file(tmp_path, {"memtrace.evaluation.score": "0.5"}, [])]).spans)
    (judge,) = failed_evaluations(G)
    assert G.nodes[judge]["score"] is None
    G = build_graph(read_span_files([_graph_file(tmp_path, {
        "memtrace.evaluation.passed": "false", "memtrace.evaluation.evidence": 5}, [])]).spans)
    assert failed_evaluations(G), "the string 'false' is never a pass"
    assert G.nodes[failed_evaluations(G)[0]]["evidence"] == []
    G = build_graph(read_span_files([_graph_file(tmp_path, {"memtrace.evaluation.passed": "yes"}, [])]).spans)
    assert evaluations(G) == [], "an unreadable verdict is skipped, not guessed"
    G = build_graph(read_span_files([_graph_file(tmp_path, {_CATEGORY: 3}, [])]).spans)
    assert G.nodes[f"op:{'ab' * 16}:{_BAD_ID}"]["category"] == "other"


@pytest.mark.parametrize("case", ["evidence as an int", "score as a string", "version with a non-ASCII digit",
                                  "step inputs as an int", "passed as the string false",
                                  "category as an int"])
def test_bad_values_through_the_cli(tmp_path, case) -> None:
    _, attributes, events = BAD_VALUES[case]
    path = _graph_file(tmp_path, attributes, events)
    runner = CliRunner()
    for command in (["inspect"], ["graph"], ["graph", "--format", "graphml"], ["inspect", "--json"]):
        outcome = runner.invoke(main, [*command, str(path)])
        assert outcome.exit_code == 3, (command, outcome.output)
        assert outcome.exception is None or isinstance(outcome.exception, SystemExit)
        assert f"{path}:3" in outcome.stderr and "Traceback" not in outcome.output


def test_duplicate_versions_are_reported_naming_both_spans(tmp_path) -> None:
    twice = {_CATEGORY: "update", _INPUTS: ["mem:1@1"], _OUTPUTS: ["mem:1@2"]}
    path = _write(tmp_path, [*(otlp_line(s, a, start=i) for i, (s, a) in enumerate(_GOOD)),
                             otlp_line("4" * 16, twice, start=5), otlp_line("5" * 16, twice, start=6)])
    G = build_graph(read_span_files([path]).spans)
    (problem,) = G.graph["problems"]
    assert problem.where == f"{path}:4"
    assert "4" * 16 in problem.message and "5" * 16 in problem.message and "mem:1@2" in problem.message
    assert producer_of(G, "mem:1@2") == f"op:{'ab' * 16}:{'4' * 16}", "the earlier writer"
