"""What the CLI reads and what its exit code says: files, ``-``, empty input, missing linked traces.

Exit codes: 0 all read; 1 a domain error (no input file exists, ``--strict``);
2 a usage error; 3 some input was skipped or repaired, or failures read memory
written in traces the input lacks.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from memtrace_otel.cli import main
from memtrace_otel.spans.model import SpanRecord
from memtrace_otel.spans.readers import read_span_files

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "offline_memory_agent.py"


def invoke(*args: str, input: str | None = None) -> Result:
    outcome = CliRunner().invoke(main, list(args), input=input)
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit), outcome.exception
    return outcome


def problem_lines(outcome: Result) -> list[str]:
    return [line for line in outcome.stderr.splitlines() if line.startswith("memtrace: ")]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The offline example's spans, whole and split into question traces and ingestion traces.

    The example writes one file, ``offline-memory-agent.jsonl``; each question runs in a trace
    of its own under an application span named ``question qN``.
    """
    out = tmp_path_factory.mktemp("example")
    subprocess.run([sys.executable, str(EXAMPLE), "--out", str(out / "all")], check=True, capture_output=True)
    whole = out / "all" / "offline-memory-agent.jsonl"
    documents = [json.loads(line) for line in whole.read_text(encoding="utf-8").splitlines() if line.strip()]
    questions = {s["traceId"] for d in documents for r in d["resourceSpans"] for ss in r["scopeSpans"]
                 for s in ss["spans"] if s["name"].startswith("question ")}
    paths = {"all": whole}
    for part, wanted in (("questions", True), ("ingestion", False)):
        lines = [json.dumps({**document, "resourceSpans": [
            {**resource, "scopeSpans": [
                {**scope, "spans": [s for s in scope["spans"] if (s["traceId"] in questions) == wanted]}
                for scope in resource["scopeSpans"]]}
            for resource in document["resourceSpans"]]}) for document in documents]
        paths[part] = out / f"{part}.jsonl"
        paths[part].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def verdicts(outcome: Result) -> dict[str, tuple[str, str]]:
    failures = json.loads(outcome.stdout)["failures"]
    return {f["case_id"]: (f["error_type"], f["operation_name"]) for f in failures}


# -- missing linked traces -------------------------------------------------------------

def test_failures_whose_memory_came_from_absent_traces_are_said_and_exit_3(example) -> None:
    outcome = invoke("analyze", "--json", str(example["questions"]))
    assert outcome.exit_code == 3, outcome.stderr
    (line,) = [line for line in problem_lines(outcome) if "--jaeger" in line]
    missing = json.loads(outcome.stdout)["missing_traces"]
    assert missing and f"{len(missing)} trace(s)" in line and "not in the input" in line
    assert len(problem_lines(outcome)) == 1, outcome.stderr  # that line and nothing else
    table = invoke("analyze", str(example["questions"]))
    assert table.exit_code == 3 and sum("--jaeger" in line for line in problem_lines(table)) == 1
    strict = invoke("analyze", "--strict", str(example["questions"]))
    assert strict.exit_code == 1 and "--strict" in strict.stderr


def test_the_whole_input_needs_no_warning(example) -> None:
    outcome = invoke("analyze", "--json", str(example["all"]))
    assert outcome.exit_code == 0, outcome.stderr
    assert problem_lines(outcome) == [] and json.loads(outcome.stdout)["missing_traces"] == []
    split = invoke("analyze", "--json", str(example["questions"]), str(example["ingestion"]))
    assert split.exit_code == 0 and verdicts(split) == verdicts(outcome)


# -- fetching them from a trace backend (a real HTTP server on loopback) ---------------

def jaeger_tag(key: str, value: Any) -> dict[str, Any]:
    kind = ("bool" if isinstance(value, bool) else "int64" if isinstance(value, int)
            else "float64" if isinstance(value, float) else "string")
    return {"key": key, "type": kind, "value": json.dumps(value) if isinstance(value, list) else value}


def jaeger_trace(spans: list[SpanRecord]) -> dict[str, Any]:
    """Spans as Jaeger's query API answers them (what ``jaeger-query`` would serve)."""
    raw = []
    for s in spans:
        references = [{"refType": "CHILD_OF", "traceID": s.trace_id, "spanID": s.parent_span_id}
                      ] if s.parent_span_id else []
        references += [{"refType": "FOLLOWS_FROM", "traceID": link.trace_id, "spanID": link.span_id}
                       for link in s.links]
        raw.append({"traceID": s.trace_id, "spanID": s.span_id, "operationName": s.name,
                    "references": references, "startTime": s.start_time_unix_nano // 1000,
                    "duration": (s.end_time_unix_nano - s.start_time_unix_nano) // 1000,
                    "tags": [jaeger_tag(k, v) for k, v in s.attributes.items()], "processID": "p1"})
    return {"traceID": spans[0].trace_id, "spans": raw, "processes": {"p1": {"serviceName": "agent"}}}


class Backend(ThreadingHTTPServer):
    mode = "ok"
    traces: dict[str, dict[str, Any]]


class Handler(BaseHTTPRequestHandler):
    server: Backend

    def do_GET(self) -> None:
        trace_id = self.path.rsplit("/", 1)[-1]
        mode = self.server.mode
        if mode == "500":
            status, body = 500, {"errors": 5}
        elif mode == "empty":
            status, body = 200, {"data": []}
        elif trace_id in self.server.traces:
            status, body = 200, {"data": [self.server.traces[trace_id]]}
        else:
            status, body = 404, {"errors": [{"code": 404, "msg": "trace not found"}]}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def backend(example) -> Iterator[Backend]:
    server = Backend(("127.0.0.1", 0), Handler)
    by_trace: dict[str, list[SpanRecord]] = {}
    for span in read_span_files([example["ingestion"]]).spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    server.traces = {trace_id: jaeger_trace(spans) for trace_id, spans in by_trace.items()}
    thread = threading.Thread(target=server.serve_forever, name="fake-jaeger-query", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def url_of(server: Backend) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_jaeger_fetches_the_missing_traces_and_says_so_once(example, backend) -> None:
    whole = invoke("analyze", "--json", str(example["all"]))
    outcome = invoke("analyze", "--json", "--jaeger", url_of(backend), str(example["questions"]))
    assert outcome.exit_code == 0, outcome.stderr
    missing = len(json.loads(invoke("analyze", "--json", str(example["questions"])).stdout)["missing_traces"])
    (line,) = problem_lines(outcome)  # one line, and no problem
    url = re.escape(url_of(backend))
    fetched = re.fullmatch(rf"memtrace: fetched (\d+) of (\d+) linked trace\(s\) from {url}", line)
    assert fetched and int(fetched[1]) == int(fetched[2]) >= missing > 0, line  # links are followed further
    assert verdicts(outcome) == verdicts(whole)
    assert invoke("inspect", "--json", "--jaeger", url_of(backend), str(example["all"])).stderr == ""


@pytest.mark.parametrize("mode", ["500", "empty"])
def test_a_backend_that_does_not_deliver_counts_nothing_as_fetched(example, backend, mode) -> None:
    backend.mode = mode
    outcome = invoke("analyze", "--json", "--jaeger", url_of(backend), str(example["questions"]))
    assert outcome.exit_code == 3, outcome.stderr
    lines = problem_lines(outcome)
    assert sum(line.startswith("memtrace: fetched 0 of ") for line in lines) == 1, lines
    assert sum("neither in the input nor at" in line for line in lines) == 1, lines
    assert "Traceback" not in outcome.stderr


def test_a_malformed_jaeger_url_is_a_usage_error(example) -> None:
    outcome = invoke("inspect", "--jaeger", "file:///etc/passwd", str(example["questions"]))
    assert outcome.exit_code == 2 and "--jaeger" in outcome.stderr


# -- files, directories, standard input ------------------------------------------------

def test_standard_input_is_read_for_dash(example) -> None:
    text = example["all"].read_text(encoding="utf-8")
    from_file = json.loads(invoke("inspect", "--json", str(example["all"])).stdout)
    from_stdin = invoke("inspect", "--json", "-", input=text)
    assert from_stdin.exit_code == 0, from_stdin.stderr
    assert json.loads(from_stdin.stdout)["spans"] == from_file["spans"] > 0
    analyzed = invoke("analyze", "--json", "-", input=text)
    assert analyzed.exit_code == 0 and len(json.loads(analyzed.stdout)["failures"]) == 6


@pytest.mark.parametrize("command", ["inspect", "graph", "analyze"])
def test_empty_input_is_a_problem_not_silence(tmp_path, command) -> None:
    empty_file = tmp_path / "empty.jsonl"
    empty_file.write_text("", encoding="utf-8")
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    unrelated = tmp_path / "notes"
    unrelated.mkdir()
    (unrelated / "README.txt").write_text("no spans here", encoding="utf-8")
    for path in (empty_file, empty_dir, unrelated):
        outcome = invoke(command, str(path))
        assert outcome.exit_code == 3, (path, outcome.output)
        lines = problem_lines(outcome)
        assert lines and all(str(path) in line for line in lines), (path, lines)


def test_no_such_file_stays_a_clear_error(tmp_path, example) -> None:
    alone = invoke("analyze", str(tmp_path / "nope.jsonl"))
    assert alone.exit_code == 1 and "nope.jsonl: no such file" in alone.stderr
    assert alone.stdout == ""
    both = invoke("inspect", "--json", str(tmp_path / "nope.jsonl"), str(example["all"]))
    assert both.exit_code == 3 and "nope.jsonl" in both.stderr
    assert json.loads(both.stdout)["spans"] > 0  # the file that exists is still read


def test_help_lists_the_engines_and_every_registered_command_exists() -> None:
    from memtrace_otel.attribution.base import available_engines
    from memtrace_otel.cli import _COMMANDS

    text = invoke("analyze", "--help").stdout
    assert all(engine in text for engine in available_engines()) and "lineage" in text
    assert "--help` for the list" not in text
    top = invoke("--help").stdout
    for name in _COMMANDS:  # a registration without its module is dead code (and broke --help)
        assert name in top.split() and main.get_command(None, name).name == name  # type: ignore[arg-type]
