"""The mem0 instrumentor across processes: lineage through records, attribution, ``opentelemetry-instrument``.

Each phase of ``mem0_app.py`` runs in its own process against one qdrant directory and
the test's local LLM server, writing its spans to a file of its own; ``memtrace
analyze`` then reads all the files, as it would read what a fleet exported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from mem0_script import add_replies, decision

from memtrace_otel.graph import build_graph
from memtrace_otel.graph.packed import unpacked
from memtrace_otel.instrument.mem0 import mem0_generation
from memtrace_otel.semconv import ErrorType, MemTrace, MemTraceEvent, MemTraceStage
from memtrace_otel.spans import read_span_files

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def app(server: Any, tmp_path: Path, out: str, *args: str) -> Any:
    env = {**os.environ, "MEM0_TELEMETRY": "False",
           "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    done = subprocess.run([sys.executable, str(HERE / "mem0_app.py"), *args, "--llm", server.base_url,
                           "--data", str(tmp_path / "data"), "--out", str(tmp_path / "spans" / out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def ingest_lisbon(server: Any, tmp_path: Path) -> str:
    (tmp_path / "spans").mkdir(exist_ok=True)
    server.enqueue(*add_replies(["Moved to Lisbon in March"]))
    added = app(server, tmp_path, "1-ingest.jsonl", "add", "--text", "I moved to Lisbon in March.")
    return added["results"][0]["id"]


def spans_of(path: Path) -> list[Any]:
    """The spans of ``path`` as the graph builder reads them (a packed ``add`` with its stage events)."""
    result = read_span_files([path])
    assert not result.problems
    return unpacked(result.spans)


def test_search_in_another_process_links_to_the_writer(llm_server: Any, tmp_path: Path) -> None:
    record = ingest_lisbon(llm_server, tmp_path)
    asked = app(llm_server, tmp_path, "2-ask.jsonl", "ask")
    assert asked["found"] == [record] and asked["passed"]
    ingest = spans_of(tmp_path / "spans" / "1-ingest.jsonl")
    name = MemTrace.OPERATION_NAME
    writer = {s.attributes[name]: s for s in ingest if name in s.attributes}
    (search,) = [s for s in spans_of(tmp_path / "spans" / "2-ask.jsonl")
                 if s.attributes.get(MemTrace.OPERATION_NAME) == "mem0.search"]
    add = writer["mem0.add"]  # its create_memory stage event wrote the record
    assert "mem0.create" not in writer and search.trace_id != add.trace_id
    assert [(link.trace_id, link.span_id) for link in search.links] == [(add.trace_id, add.span_id)]
    G = build_graph(read_span_files([tmp_path / "spans"]).spans)
    message = next(v for v in writer["mem0.add"].attributes[MemTrace.OUTPUTS] if v.startswith("msg:"))
    assert nx.has_path(G, message, "answer:q1@1")  # message -> facts -> record -> context -> answer


def _inject(kind: ErrorType, server: Any, tmp_path: Path, record: str) -> list[str]:
    """Make the second session (or the question) lose Lisbon the way ``kind`` says; ask's options."""
    if kind is ErrorType.RETRIEVAL:
        server.enqueue(*add_replies(["Likes jazz music"]))
        app(server, tmp_path, "2-change.jsonl", "add", "--text", "I like jazz music.")
        return ["--threshold", "0.999"]  # the search leaves the record out
    if mem0_generation() == 1:  # the LLM's scripted decision on the existing memory "0"
        event = "UPDATE" if kind is ErrorType.UPDATE else "DELETE"
        server.enqueue(*add_replies(["Likes jazz music"], [decision(event, "Likes jazz music", "0")]))
        app(server, tmp_path, "2-change.jsonl", "add", "--text", "I like jazz music.")
    elif kind is ErrorType.UPDATE:
        app(server, tmp_path, "2-change.jsonl", "update", "--record", record, "--text", "Likes jazz music")
    else:
        app(server, tmp_path, "2-change.jsonl", "delete", "--record", record)
    return []


@pytest.mark.parametrize(("kind", "operation"), [
    (ErrorType.UPDATE, "mem0.update"),
    (ErrorType.DELETION, "mem0.delete"),
    (ErrorType.RETRIEVAL, "mem0.search"),
])
def test_analyze_blames_the_mem0_operation(kind: ErrorType, operation: str, llm_server: Any,
                                           tmp_path: Path) -> None:
    record = ingest_lisbon(llm_server, tmp_path)
    asked = app(llm_server, tmp_path, "3-ask.jsonl", "ask", *_inject(kind, llm_server, tmp_path, record))
    assert not asked["passed"]
    done = subprocess.run([str(BIN / "memtrace"), "analyze", "--json", str(tmp_path / "spans")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (failure,) = json.loads(done.stdout)["failures"]
    assert (failure["error_type"], failure["operation_name"]) == (kind.value, operation)
    if kind is not ErrorType.RETRIEVAL:  # the operation that changed the very record holding the fact
        # A change decided inside an add is a stage event of its span (found by its stage id).
        spans = unpacked(read_span_files([tmp_path / "spans"]).spans)
        attributes = [s.attributes for s in spans if s.span_id == failure["span_id"]]
        attributes += [e.attributes for s in spans for e in s.events if e.name == MemTraceEvent.STAGE
                       and e.attributes.get(MemTraceStage.ID) == failure["span_id"]]
        (blamed,) = attributes
        assert blamed["gen_ai.memory.record.id"] == record


APP = f"""
import os, sys
from mem0 import Memory
sys.path.insert(0, {str(HERE)!r})
from mem0_app import config, scope
memory = Memory.from_config(config(sys.argv[1], sys.argv[2]))
memory.add("I moved to Lisbon.", user_id="alice")
memory.search("Where?", **scope(user_id="alice"))
"""


def test_opentelemetry_instrument_needs_no_code_change(llm_server: Any, tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(APP)
    llm_server.enqueue(*add_replies(["Moved to Lisbon"]))
    env = {**os.environ, "MEM0_TELEMETRY": "False", "OTEL_TRACES_EXPORTER": "console",
           "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
           "OTEL_SERVICE_NAME": "plain-mem0-app"}
    command = [str(BIN / "opentelemetry-instrument"), sys.executable, str(script), llm_server.base_url,
               str(tmp_path / "data")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    names = {line.split('"name": "', 1)[1].split('"', 1)[0] for line in done.stdout.splitlines()
             if line.startswith('    "name": "')}
    assert {"upsert_memory", "search_memory"} <= names
    # The add's write stage, in its packed facts (graph/packed.py makes it the create_memory stage).
    (packed,) = [line for line in done.stdout.splitlines() if '"memtrace.mem0.add"' in line]
    assert '[\\"write\\",' in packed
