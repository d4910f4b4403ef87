"""What ``memtrace analyze`` keeps when mem0 is traced by another instrumentation: a real-mem0 build's
spans cut down to what a GenAI-conventions mem0 instrumentation emits, scored like the original.

``python benchmarks/foreign_spans.py SRC OUT`` copies a built real-mem0 benchmark directory (``memtrace
bench mem0 --out SRC``) to ``OUT``, rewriting its span files: every mem0 span memtrace's instrumentor
made loses its ``memtrace.*`` attributes and its links (what no other instrumentation writes) and keeps
its GenAI keys (``gen_ai.operation.name``, ``gen_ai.memory.store.id``, ``gen_ai.memory.record.id``,
``gen_ai.memory.record.count`` and, content capture on, ``gen_ai.memory.records``); the spans inside
``add`` (extraction, decisions, the creates, updates and deletes it made) are dropped, as a
public-API instrumentation does not see them. The application's own operations (its answer and its
verdict, traced with ``MemoryTracer``) stay as they were. Then ``memtrace bench score OUT --engine
lineage`` scores what the record-id lineage of ``memtrace_otel.graph.foreign`` leaves; the labels are
the original's, so an operation inside ``add`` can no longer be named exactly.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

_MEM0_PREFIX = "mem0."


def _attributes(span: dict[str, Any]) -> dict[str, Any]:
    return {kv["key"]: kv.get("value", {}) for kv in span.get("attributes", [])}


def _name(span: dict[str, Any]) -> str:
    return _attributes(span).get("memtrace.operation.name", {}).get("stringValue", "")


def _spans(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for r in document.get("resourceSpans", []) for sc in r.get("scopeSpans", [])
            for s in sc.get("spans", [])]


def rewrite(document: dict[str, Any], mem0: set[str]) -> str | None:
    """One OTLP/JSON line with its mem0 spans cut down (``mem0``: the span ids of every mem0 span
    of the file, parents may be on other lines), or None when nothing of it is left."""
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            spans = scope.get("spans", [])
            kept = []
            for span in spans:
                if span["spanId"] not in mem0:
                    kept.append(span)
                elif span.get("parentSpanId") not in mem0:  # a public call: keep its GenAI keys only
                    span["attributes"] = [kv for kv in span.get("attributes", [])
                                          if not kv["key"].startswith("memtrace.")]
                    span["events"], span["links"] = [], []
                    if any(kv["key"] == "gen_ai.operation.name" for kv in span["attributes"]):
                        kept.append(span)
            scope["spans"] = kept
    if not any(s.get("spans") for r in document.get("resourceSpans", []) for s in r.get("scopeSpans", [])):
        return None
    return json.dumps(document)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python benchmarks/foreign_spans.py SRC OUT", file=sys.stderr)
        return 2
    source, out = Path(argv[0]), Path(argv[1])
    if not (source / "labels.jsonl").is_file():
        print(f"{source}: no labels.jsonl (a directory memtrace bench mem0 built)", file=sys.stderr)
        return 1
    shutil.copytree(source, out, dirs_exist_ok=True)
    for path in sorted((out / "spans").rglob("*.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()
        documents = [json.loads(line) for line in lines if line.strip()]
        mem0 = {s["spanId"] for d in documents for s in _spans(d) if _name(s).startswith(_MEM0_PREFIX)}
        rewritten = [r for r in (rewrite(d, mem0) for d in documents) if r is not None]
        path.write_text("".join(line + "\n" for line in rewritten), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
