"""Hostile span inputs: every value is type-checked where it is read, one problem line each,
nothing else lost; nesting, truncation, pipes, standard input and size are all bounded."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from memtrace_otel.config import ENV_MAX_INPUT_BYTES
from memtrace_otel.spans import read_span_files

_TRACE = "ab" * 16


def _span(span_id: str, **fields: Any) -> dict[str, Any]:
    span = {"traceId": _TRACE, "spanId": span_id, "name": f"op {span_id[:4]}", "kind": 1,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000000001000",
            "attributes": [{"key": "memtrace.operation.category", "value": {"stringValue": "other"}}],
            "status": {}}
    span.update(fields)
    return span


def _line(*spans: dict[str, Any], resource: Any = None, scope: Any = None) -> str:
    scope_spans: dict[str, Any] = {"spans": list(spans)}
    if scope is not None:
        scope_spans["scope"] = scope
    entry: dict[str, Any] = {"scopeSpans": [scope_spans]}
    if resource is not None:
        entry["resource"] = resource
    return json.dumps({"resourceSpans": [entry]})


def _good(index: int) -> dict[str, Any]:
    return _span(f"{index + 1:016x}")


def _write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _attr(key: str, value: Any) -> list[dict[str, Any]]:
    return [{"key": "memtrace.operation.category", "value": {"stringValue": "other"}},
            {"key": key, "value": value}]


BAD_ATTRIBUTES = {
    "intValue 'x' is not an integer": {"intValue": "x"},
    "intValue '²' is not an integer": {"intValue": "²"},
    "is not an integer": {"intValue": "9" * 5000},
    "intValue 1.5 is not an integer": {"intValue": 1.5},
    "boolValue 'false' is not true or false": {"boolValue": "false"},
    "stringValue 5 is not a string": {"stringValue": 5},
    "doubleValue 'abc' is not a number": {"doubleValue": "abc"},
    "arrayValue values": {"arrayValue": {"values": 5}},
    "unknown AnyValue field": {"fooValue": 1},
    "is not an AnyValue object": 5,
    "nested deeper than": json.loads('{"arrayValue": {"values": [' * 40 + "]}}" * 40),
}


@pytest.mark.parametrize("expected", sorted(BAD_ATTRIBUTES))
def test_a_wrongly_typed_attribute_is_one_problem_and_only_it_is_skipped(tmp_path: Path,
                                                                        expected: str) -> None:
    bad = _span("b" * 16, attributes=_attr("memtrace.evaluation.evidence", BAD_ATTRIBUTES[expected]))
    path = _write(tmp_path / "spans.jsonl", _line(_good(0)), _line(bad, _good(1)), _line(_good(2)))
    result = read_span_files([path])
    assert len(result.spans) == 4  # the bad span too, without the bad attribute
    kept = next(s for s in result.spans if s.span_id == "b" * 16)
    assert kept.attributes == {"memtrace.operation.category": "other"}
    (problem,) = result.problems
    assert problem.where == f"{path}:2"
    assert f"span {'b' * 16}" in problem.message and "'memtrace.evaluation.evidence'" in problem.message
    assert expected in problem.message and "\n" not in str(problem)


BAD_SPAN_FIELDS = {  # field -> (value, the span is kept?, words of the problem)
    "startTimeUnixNano": ("12x", False, "startTimeUnixNano '12x' is not a non-negative integer"),
    "endTimeUnixNano": (-5, False, "endTimeUnixNano -5 is not a non-negative integer"),
    "name": (5, False, "name 5 is not a string"),
    "kind": ("x", True, "kind 'x' is not a span kind"),
    "status": ({"code": "bad"}, True, "status code 'bad' is not a status code"),
    "events": ([{"name": "e", "timeUnixNano": True}], True, "event skipped: timeUnixNano True"),
    "links": ([{"traceId": _TRACE, "spanId": 7}], True, "link dropped: id 7 is not a string"),
}


@pytest.mark.parametrize("field", sorted(BAD_SPAN_FIELDS))
def test_a_wrongly_typed_span_field_is_one_problem(tmp_path: Path, field: str) -> None:
    value, kept, words = BAD_SPAN_FIELDS[field]
    path = _write(tmp_path / "spans.jsonl", _line(_good(0), _span("b" * 16, **{field: value}), _good(1)))
    result = read_span_files([path])
    assert {s.span_id for s in result.spans} == {_good(0)["spanId"], _good(1)["spanId"]} | (
        {"b" * 16} if kept else set())
    (problem,) = result.problems
    assert problem.where == f"{path}:1" and words in problem.message


def test_kind_status_scope_and_resource_are_read(tmp_path: Path) -> None:
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}},
                               {"key": "host.cpus", "value": {"intValue": "4"}}]}
    line = _line(_span("b" * 16, kind="SPAN_KIND_PRODUCER", status={"code": 2, "message": "boom"}),
                 resource=resource, scope={"name": "lib", "version": "1.2"})
    (span,) = read_span_files([_write(tmp_path / "s.jsonl", line)]).spans
    assert (span.kind, span.status_code, span.status_message) == ("PRODUCER", "ERROR", "boom")
    assert (span.scope_name, span.scope_version, span.service_name) == ("lib", "1.2", "svc")
    assert span.resource_attributes == {"service.name": "svc", "host.cpus": 4}


def test_a_bad_resource_attribute_or_scope_is_reported_and_the_spans_kept(tmp_path: Path) -> None:
    resource = {"attributes": [{"key": "service.name", "value": {"intValue": "7"}},
                               {"key": "x", "value": {"boolValue": 1}}]}
    path = _write(tmp_path / "s.jsonl", _line(_good(0), resource=resource, scope={"name": 3}))
    result = read_span_files([path])
    assert len(result.spans) == 1 and result.spans[0].service_name == ""
    messages = sorted(p.message for p in result.problems)
    assert len(messages) == 3
    assert "resource attribute 'service.name'" in messages[0] and "resource attribute 'x'" in messages[1]
    assert "scope name 3 is not a string" in messages[2]


def test_a_document_nested_1000_deep_is_one_problem_and_the_other_files_are_read(tmp_path: Path) -> None:
    depth = 1000
    deep = tmp_path / "a-deep.json"
    deep.write_text('{\n "resourceSpans":\n' + "[\n" * depth + "]\n" * depth + "}\n")
    deeper = tmp_path / "b-deeper.json"  # past the parser's nesting bound
    deeper.write_text("[\n" * 5000 + "]\n" * 5000)
    good = _write(tmp_path / "c-good.jsonl", _line(_good(0), _good(1)))
    result = read_span_files([deep, deeper, good])
    assert len(result.spans) == 2
    assert sorted(p.where.split(":")[0] for p in result.problems) == [str(deep), str(deeper)]


def test_deeply_nested_attribute_values_are_bounded(tmp_path: Path) -> None:
    value: Any = {"stringValue": "leaf"}
    for _ in range(100):
        value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
    path = _write(tmp_path / "s.jsonl", _line(_span("b" * 16, attributes=_attr("deep", value)), _good(0)))
    result = read_span_files([path])
    assert len(result.spans) == 2 and len(result.problems) == 1
    assert "nested deeper than" in result.problems[0].message


def test_invalid_utf8_is_said_once_per_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    lines = [_line(_span(f"{i + 1:016x}", name="caf@")).replace("caf@", "caf\udcff").encode(
        "utf-8", "surrogateescape") for i in range(3)]  # a lone 0xff byte in each name
    path.write_bytes(b"\n".join([_line(_good(9)).encode(), *lines]) + b"\n")
    result = read_span_files([path])
    assert len(result.spans) == 4 and sum(s.name == "caf\ufffd" for s in result.spans) == 3
    (problem,) = result.problems
    assert problem.where == str(path) and "3 line(s) had invalid UTF-8" in problem.message
    assert "first at line 2" in problem.message


def test_empty_inputs_are_problems(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    blank = _write(tmp_path / "blank.jsonl", "", "   ", "")
    no_spans = _write(tmp_path / "none.jsonl", json.dumps({"resourceSpans": []}))
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "README.txt").write_text("not spans")
    result = read_span_files([empty, blank, no_spans, tmp_path / "nothing"])
    assert result.spans == []
    assert [str(p) for p in result.problems] == [
        f"{empty}: no spans in file", f"{blank}: no spans in file", f"{no_spans}: no spans in file",
        f"{tmp_path / 'nothing'}: no span files (.json, .jsonl, .gz) in directory"]


def test_a_fifo_in_a_directory_is_skipped_not_waited_on(tmp_path: Path) -> None:
    _write(tmp_path / "a.jsonl", _line(_good(0)))
    os.mkfifo(tmp_path / "b.jsonl")  # nothing will ever write to it
    outcome: list[Any] = []
    reader = threading.Thread(target=lambda: outcome.append(read_span_files([tmp_path])), daemon=True)
    reader.start()
    reader.join(timeout=60)  # a liveness guard: without the fix this read never returns
    assert outcome, "reading a directory with a FIFO in it hung"
    (result,) = outcome
    assert len(result.spans) == 1
    assert [str(p) for p in result.problems] == [f"{tmp_path / 'b.jsonl'}: not a regular file (a pipe or "
                                                 "device?); skipped"]


_STDIN_CHILD = """
import sys
from memtrace_otel.spans import read_span_files
result = read_span_files(["-"])
print(len(result.spans), [str(p) for p in result.problems])
"""


@pytest.mark.parametrize("compress", [False, True])
def test_dash_reads_standard_input(compress: bool) -> None:
    data = (_line(_good(0), _good(1)) + "\n" + _line(_good(2)) + "\n").encode()
    child = subprocess.run([sys.executable, "-c", _STDIN_CHILD], capture_output=True, timeout=120,
                           input=gzip.compress(data) if compress else data)
    assert child.returncode == 0, child.stderr
    assert child.stdout.decode().strip() == "3 []"


def test_the_input_ceiling_keeps_the_whole_lines_before_it(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [_line(_good(i)) for i in range(10)]
    path = _write(tmp_path / "s.jsonl", *lines)
    limit = sum(len(line) + 1 for line in lines[:4]) + 10  # four lines and a bit of the fifth
    result = read_span_files([path], max_bytes=limit)
    assert len(result.spans) == 4
    assert [p.message for p in result.problems][-1] == (
        f"only the first {limit:,} bytes were read (ceiling {ENV_MAX_INPUT_BYTES}); the rest skipped")
    monkeypatch.setenv(ENV_MAX_INPUT_BYTES, str(limit))
    assert len(read_span_files([path]).spans) == 4
    with pytest.raises(ValueError, match="max_bytes"):
        read_span_files([path], max_bytes=0)


def test_a_gzip_of_zeros_costs_no_memory(tmp_path: Path) -> None:
    path = tmp_path / "zeros.jsonl.gz"
    with gzip.open(path, "wb") as handle:
        for _ in range(64):
            handle.write(bytes(1 << 20))
    tracemalloc.start()
    try:
        result = read_span_files([path])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.spans == [] and len(result.problems) == 1
    assert "does not start with" in result.problems[0].message
    assert peak < 16 << 20, f"peak {peak:,} bytes for a 64 MiB line of zeros"


def test_a_gzip_of_newlines_is_blank(tmp_path: Path) -> None:
    path = tmp_path / "newlines.jsonl.gz"
    with gzip.open(path, "wb") as handle:
        for _ in range(32):
            handle.write(b"\n" * (1 << 20))
        handle.write(_line(_good(0)).encode() + b"\n")
    result = read_span_files([path])
    assert len(result.spans) == 1 and result.spans[0].source == f"{path}:{32 * (1 << 20) + 1}"


def test_a_short_truncated_gzip_keeps_its_whole_lines(tmp_path: Path) -> None:
    """A writer killed before closing: no trailer, and well under the old 64 KiB look-ahead."""
    text = "".join(_line(_good(i)) + "\n" for i in range(5)).encode()
    whole = gzip.compress(text)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[:-8])  # the CRC and size trailer never made it
    result = read_span_files([path])
    assert len(result.spans) == 5
    (problem,) = result.problems
    assert "truncated" in problem.message


def test_a_gzip_cut_anywhere_keeps_every_member_before_the_cut(tmp_path: Path) -> None:
    members = [gzip.compress((_line(_good(i)) + "\n").encode()) for i in range(6)]
    data = b"".join(members)
    path = tmp_path / "members.jsonl.gz"
    for cut in range(0, len(data), 97):
        path.write_bytes(data[:cut])
        whole = 0
        while whole < len(members) and sum(map(len, members[:whole + 1])) <= cut:
            whole += 1
        result = read_span_files([path])
        # A member cut only in its trailer still holds its whole line.
        assert whole <= len(result.spans) <= whole + 1, cut


def test_a_broken_pretty_printed_document_is_one_problem(tmp_path: Path) -> None:
    document = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [_good(0)]}]}]}, indent=2)
    path = tmp_path / "doc.json"
    path.write_text(document[: len(document) // 2])
    result = read_span_files([path])
    assert result.spans == [] and len(result.problems) == 1
    assert "invalid JSON document" in result.problems[0].message


JAEGER_BAD_TAGS = {
    "int64 tag value 'x' is not an integer": {"key": "n", "type": "int64", "value": "x"},
    "bool tag value 'true' is not true or false": {"key": "b", "type": "bool", "value": "true"},
    "string tag value 5 is not a string": {"key": "s", "type": "string", "value": 5},
    "is not a Jaeger tag": {"key": "t", "type": "weird", "value": 1},
    "'span.kind': 'sideways' is not a span kind": {"key": "span.kind", "type": "string", "value": "sideways"},
}


@pytest.mark.parametrize("expected", sorted(JAEGER_BAD_TAGS))
def test_jaeger_tags_are_type_checked(tmp_path: Path, expected: str) -> None:
    span = {"traceID": "ab" * 16, "spanID": "cd" * 8, "operationName": "op", "startTime": 1, "duration": 2,
            "tags": [{"key": "keep", "type": "string", "value": "me"}, JAEGER_BAD_TAGS[expected]]}
    other = {**span, "spanID": "ef" * 8, "tags": []}
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps({"data": [{"spans": [span, other]}]}, indent=1))
    result = read_span_files([path])
    assert len(result.spans) == 2 and result.spans[0].attributes == {"keep": "me"}
    (problem,) = result.problems
    assert f"span {'cd' * 8}" in problem.message and expected in problem.message


def test_jaeger_span_fields_are_type_checked(tmp_path: Path) -> None:
    base = {"traceID": "ab" * 16, "operationName": "op", "startTime": 1, "duration": 2}
    spans = [{**base, "spanID": "01", "startTime": "1"}, {**base, "spanID": "0x2"},
             {**base, "spanID": "03", "operationName": ["x"]},
             {**base, "spanID": "04", "logs": [{"timestamp": -1}]}, {**base, "spanID": "05"}]
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps({"data": [{"spans": spans}]}, indent=1))
    result = read_span_files([path])
    assert [s.span_id[-2:] for s in result.spans] == ["04", "05"] and result.spans[0].events == []
    assert len(result.problems) == 4
