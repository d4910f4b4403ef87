"""memtrace's mem0 instrumentor beside loongsuite-instrumentation-mem0 in one program.

Both wrap ``Memory.add`` / ``search`` / ``update`` ... with ``wrapt`` and both are found by
``opentelemetry-instrument`` through the ``opentelemetry_instrumentor`` entry points. What must hold:
the program runs; each method carries exactly one layer of each (nothing double-wrapped); each call
makes one span of each, ours with the lineage, theirs with their own attributes; either can be
switched off by its own entry-point name; and taking ours off leaves theirs in place, whichever
wrapped first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import wrapt
from mem0_app import config
from mem0_script import add_replies
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.graph.packed import unpacked
from memtrace_otel.instrument.mem0 import Mem0Instrumentor
from memtrace_otel.semconv import GenAI, MemTrace, MemTraceEvent
from memtrace_otel.spans import read_span_files

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
OURS, THEIRS = "memtrace_otel", "opentelemetry.instrumentation.mem0"
"""Whose a wrapper layer is: its function's module (ours: any of ``memtrace_otel``'s, ``_whose``)."""


def _whose(modules: list[str]) -> list[str]:
    return sorted(OURS if module.startswith(f"{OURS}.") else module for module in modules)
THEIR_OPERATION = "memory_operation"
"""loongsuite's ``gen_ai.operation.name`` on every mem0 span; the method is in ``gen_ai.memory.operation``."""


def _run_app(llm_server: Any, tmp_path: Path, **env: str) -> tuple[dict[str, Any], list[Any]]:
    llm_server.enqueue(*add_replies(["Moved to Lisbon"]), *add_replies(["Has a dog called Pepper"]))
    out = tmp_path / "spans.jsonl"
    environment = {**os.environ, "MEM0_TELEMETRY": "False", "OTEL_TRACES_EXPORTER": "none",
                   "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
                   "OTEL_SERVICE_NAME": "peers-app", **env}
    command = [str(BIN / "opentelemetry-instrument"), sys.executable, str(HERE / "peers_app.py"),
               llm_server.base_url, str(tmp_path / "data"), str(out)]
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    read = read_span_files([out]) if out.exists() and out.stat().st_size else None
    return report, (read.spans if read else [])


def _ours(spans: list[Any]) -> list[Any]:
    return [s for s in spans if s.scope_name == "memtrace_otel"]


def _theirs(spans: list[Any]) -> list[Any]:
    return [s for s in spans if s.attributes.get(GenAI.OPERATION_NAME) == THEIR_OPERATION]


def test_opentelemetry_instrument_runs_both_once_each(llm_server: Any, tmp_path: Path) -> None:
    report, spans = _run_app(llm_server, tmp_path)
    for method, layers in report["layers"].items():
        assert _whose(layers) == sorted([OURS, THEIRS]), (method, layers)  # one layer each, no more
    record = report["record"]
    ours = Counter(s.name for s in _ours(spans) if GenAI.OPERATION_NAME in s.attributes)
    assert ours == {"upsert_memory": 2, "update_memory": 1, "search_memory": 1}
    # Each add's record is a create_memory stage of its one span (docs/conventions.md), packed by default.
    creates = [e for s in unpacked(_ours(spans)) for e in s.events if e.name == MemTraceEvent.STAGE
               and e.attributes.get(GenAI.OPERATION_NAME) == "create_memory"]
    assert len(creates) == 2
    theirs = [s.attributes["gen_ai.memory.operation"] for s in _theirs(spans)]
    assert theirs == ["add", "add", "update", "search"]  # one of theirs per call, in call order
    # Ours carry the lineage: the search read the updated record, linked to the span that updated it
    # (the packed search's as the graph builder reads it).
    by_name = {s.name: s for s in unpacked(_ours(spans))}
    update, search = by_name["update_memory"], by_name["search_memory"]
    assert update.attributes[GenAI.MEMORY_RECORD_ID] == record
    assert f"mem0:{record}@2" in search.attributes[MemTrace.INPUTS]
    assert update.span_id in {link.span_id for link in search.links}
    # Theirs carry their own attributes, untouched by ours.
    (their_update,) = [s for s in _theirs(spans) if s.attributes["gen_ai.memory.operation"] == "update"]
    assert their_update.attributes["gen_ai.memory.id"] == record
    assert not any(key.startswith("memtrace.") for s in _theirs(spans) for key in s.attributes)


@pytest.mark.parametrize(("disabled", "left"), [("memtrace_mem0", THEIRS), ("mem0", OURS)])
def test_each_is_switched_off_by_its_own_name(llm_server: Any, tmp_path: Path, disabled: str,
                                              left: str) -> None:
    """Two entry points named ``mem0`` would both go with ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=mem0``."""
    report, spans = _run_app(llm_server, tmp_path, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=disabled)
    assert all(_whose(layers) == [left] for layers in report["layers"].values()), report["layers"]
    assert bool(_ours(spans)) is (left == OURS) and bool(_theirs(spans)) is (left == THEIRS)


def _layers(method: str) -> list[str]:
    from mem0.memory import main

    function, found = main.Memory.__dict__[method], []
    while isinstance(function, (wrapt.FunctionWrapper, wrapt.ObjectProxy)):
        found.append(getattr(function._self_wrapper, "__module__", "?"))
        function = function.__wrapped__
    return _whose(found)


@pytest.mark.parametrize("ours_first", [True, False], ids=["ours-first", "theirs-first"])
def test_uninstrument_takes_off_only_our_layer(llm_server: Any, tmp_path: Path, ours_first: bool) -> None:
    from mem0 import Memory
    from opentelemetry.instrumentation.mem0 import Mem0Instrumentor as LoongsuiteMem0Instrumentor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ours, theirs = Mem0Instrumentor(), LoongsuiteMem0Instrumentor()
    first, second = (ours, theirs) if ours_first else (theirs, ours)
    first.instrument(tracer_provider=provider)
    second.instrument(tracer_provider=provider)
    try:
        memory = Memory.from_config(config(llm_server.base_url, str(tmp_path)))
        llm_server.enqueue(*add_replies(["Moved to Lisbon"]))
        memory.add("I moved to Lisbon.", user_id="alice")
        assert _layers("add") == sorted([OURS, THEIRS])
        spans = list(exporter.get_finished_spans())
        assert any(s.instrumentation_scope.name == "memtrace_otel" for s in spans)
        assert any((s.attributes or {}).get(GenAI.OPERATION_NAME) == THEIR_OPERATION for s in spans)
        ours.uninstrument()
        assert _layers("add") == [THEIRS]
        exporter.clear()
        llm_server.enqueue(*add_replies(["Has a dog"]))
        memory.add("I have a dog.", user_id="alice")
        spans = list(exporter.get_finished_spans())
        assert not any(s.instrumentation_scope.name == "memtrace_otel" for s in spans)
        assert [s.attributes["gen_ai.memory.operation"] for s in spans
                if (s.attributes or {}).get(GenAI.OPERATION_NAME) == THEIR_OPERATION] == ["add"]
    finally:
        ours.uninstrument()
        theirs.uninstrument()
    assert _layers("add") == []


CAPTURE = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
           "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}
"""loongsuite's content capture (its records are in gen_ai.memory.output.messages only with it)."""


def test_analyze_reads_their_spans_by_record_id(llm_server: Any, tmp_path: Path) -> None:
    """Spans of loongsuite alone (ours switched off) become lineage through their record ids: the
    search read the version of the record the update wrote, which the add created."""
    from memtrace_otel.graph import build_graph

    report, spans = _run_app(llm_server, tmp_path, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="memtrace_mem0",
                             **CAPTURE)
    assert not _ours(spans) and len(_theirs(spans)) == 4
    G = build_graph(spans)
    record = f"record:{report['record']}"
    ops = {G.nodes[n]["name"]: n for n, d in G.nodes(data=True) if d["type"] == "operation"}
    assert list(G.successors(ops["memory_operation update"])) == [f"{record}@2"]
    assert f"{record}@2" in G.predecessors(ops["memory_operation search"])
    assert G.nodes[f"{record}@1"]["content"] == "Moved to Lisbon"
    writers = {G.nodes[w]["name"] for w in G.predecessors(f"{record}@1")}
    assert writers == {"memory_operation add"}


def test_with_both_the_calls_are_read_once_from_ours(llm_server: Any, tmp_path: Path) -> None:
    from memtrace_otel.graph import build_graph

    _, spans = _run_app(llm_server, tmp_path, **CAPTURE)
    G = build_graph(spans)
    assert not any(str(node).startswith("record:") for node in G)
    names = [d["name"] for _, d in G.nodes(data=True) if d["type"] == "operation"]
    assert not any(name.startswith("memory_operation") for name in names) and "mem0.search" in names
