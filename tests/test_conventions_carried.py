"""Every key docs/conventions.md promises on operation spans is carried by real spans.

A realistic run (tests/scenario.py: ingestion, extraction with an LLM call, update,
deletion, memory searches, generation, evaluations; then a document retrieval, a
no-op decision and a failing rerank) goes through the real SDK pipeline into an
in-memory exporter and through the project's OTLP/JSON Lines file exporter, whose
file is read back with ``read_span_files``. Both must carry every key of the
Attributes, Events and Links tables, with the documented type; the keys marked
"opt-in content" only when content capture is on, and nowhere when it is off.
(Write-back span keys are documented in their own section and checked by the
write-back tests.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
from memtrace_otel.feedback import record_feedback
from memtrace_otel.semconv import CONTENT_KEYS, MemTrace
from memtrace_otel.spans import read_span_files

from scenario import run_more, run_pipeline

DOCS = Path(__file__).resolve().parent.parent / "docs" / "conventions.md"
_SECTIONS = ("Attributes", "Events", "Links")
_KEY = re.compile(r"`([a-z_]+(?:\.[a-z_]+)+)`")


@dataclass(frozen=True, slots=True)
class Documented:
    key: str
    type: str  # as the docs write it: string, int, double, boolean, string[], string (JSON)
    content: bool


def _rows(section: str) -> Iterable[list[str]]:
    text = DOCS.read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 3:
            yield cells


def documented() -> dict[str, Documented]:
    """Key -> what the docs say of it, from the Attributes, Links and Events tables."""
    keys: dict[str, Documented] = {}
    for section in ("Attributes", "Links"):
        for key_cell, type_cell, when, *_ in _rows(section):
            (key,) = _KEY.findall(key_cell)
            keys[key] = Documented(key, type_cell, "opt-in content" in when)
    for _, _, attributes, *_ in _rows("Events"):
        for key, type_cell in re.findall(r"`([a-z_.]+)`(?: \(([^)]+)\))?", attributes):
            keys.setdefault(key, Documented(key, type_cell or "string", False))
    return keys


def documented_events() -> set[str]:
    return {cells[0].strip("`") for cells in _rows("Events")}


def _is(type_name: str, value: Any) -> bool:
    if type_name == "string (JSON)":
        return isinstance(value, str) and isinstance(json.loads(value), list)
    if type_name.endswith("[]"):
        return isinstance(value, (list, tuple)) and all(_is(type_name[:-2], v) for v in value)
    checks = {"string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
              "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "double": lambda v: isinstance(v, float)}
    return checks[type_name](value)


class Carried:
    """Every attribute value seen, per key, on spans, their events and their links."""

    def __init__(self) -> None:
        self.values: dict[str, list[Any]] = {}
        self.events: set[str] = set()
        self.names: list[str] = []

    def add(self, attributes: Any) -> None:
        for key, value in (attributes or {}).items():
            self.values.setdefault(key, []).append(value)

    @classmethod
    def of(cls, spans: Iterable[Any]) -> Carried:
        carried = cls()
        for span in spans:
            carried.add(span.attributes)
            carried.names.append(span.attributes.get(MemTrace.OPERATION_NAME, ""))
            for event in span.events:
                carried.events.add(event.name)
                carried.add(event.attributes)
            for link in span.links:
                carried.add(link.attributes)
        return carried


def _run(tmp_path: Path, capture: bool) -> tuple[Carried, Carried]:
    memory, path = InMemorySpanExporter(), tmp_path / f"spans-{capture}.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    mt = run_pipeline(provider, capture_content=capture)
    run_more(mt, provider)
    # A verdict recorded apart from the answer it judges carries the memtrace.evaluation.target.* keys.
    record_feedback(memory.get_finished_spans()[-1].context, correction="Porto", tracer=mt)
    provider.shutdown()
    read = read_span_files([path])
    assert read.problems == []
    assert len(read.spans) == len(memory.get_finished_spans())
    return Carried.of(_operations(memory.get_finished_spans())), Carried.of(_operations(read.spans))


def _operations(spans: Iterable[Any]) -> list[Any]:
    return [s for s in spans if MemTrace.OPERATION_CATEGORY in s.attributes]


def test_the_docs_tables_parse_and_mark_exactly_the_content_keys() -> None:
    keys = documented()
    assert len(keys) > 40 and {"memtrace.step.name", "memtrace.link.variable", "error.type"} <= set(keys)
    assert {k for k, d in keys.items() if d.content} == set(CONTENT_KEYS)
    assert documented_events() == {"gen_ai.evaluation.result", "memtrace.step", "exception"}


@pytest.mark.parametrize("capture", [False, True], ids=["content-off", "content-on"])
def test_every_documented_key_is_carried(tmp_path, capture) -> None:
    keys = documented()
    for where, carried in zip(("in-memory exporter", "OTLP/JSON file"), _run(tmp_path, capture), strict=True):
        expected = {k for k, d in keys.items() if capture or not d.content}
        missing = sorted(expected - set(carried.values))
        assert not missing, f"{where}: documented keys no span carries: {missing}"
        leaked = sorted(k for k, d in keys.items() if d.content and k in carried.values and not capture)
        assert not leaked, f"{where}: content keys carried with content capture off: {leaked}"
        wrong = sorted(k for k in expected if not all(_is(keys[k].type, v) for v in carried.values[k]))
        assert not wrong, f"{where}: keys not of their documented type: {wrong}"
        assert documented_events() <= carried.events, where
        assert all(carried.names), f"{where}: an operation span without {MemTrace.OPERATION_NAME}"


def test_content_keys_hold_the_content(tmp_path) -> None:
    carried, from_file = _run(tmp_path, True)
    for values in (carried.values, from_file.values):
        records = [json.loads(v) for v in values["gen_ai.memory.records"]]
        # Searches' records have scores; creates' records (what they stored) have none.
        found = [(r["id"], r["score"]) for (r,) in records if "score" in r]
        assert found == [("mem:D1:1", 0.8), ("mem:D1:2", 0.8)]
        stored = [r for (r,) in records if "score" not in r]
        assert stored and all(r["content"] for r in stored)
        (documents,) = (json.loads(v) for v in values["gen_ai.retrieval.documents"])
        assert documents == [
            {"id": "doc:lisbon", "content": "Lisbon has 2,800 sunshine hours.", "score": 0.9},
            {"id": "doc:porto", "content": "Porto has 2,500 sunshine hours.", "score": 0.7}]
        assert "Which city is sunnier?" in values["gen_ai.retrieval.query.text"]
        assert "Where did the user move?" in values["gen_ai.memory.query.text"]
