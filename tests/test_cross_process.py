"""Lineage across two processes: the link comes from the traceparent stored in the record."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from memtrace_otel.graph import build_graph, lineage_path, producer_of
from memtrace_otel.spans import read_span_files

WRITER = textwrap.dedent("""
    import json, sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from memtrace_otel import Category, MemoryTracer
    from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(sys.argv[1])))
    mt = MemoryTracer(provider, capture_content=True)
    store = []
    with mt.operation("ingest", Category.INGEST) as op:
        message = op.write("msg:D1:1", "I moved to Lisbon", kind="message")
    with mt.operation("extract", Category.EXTRACTION) as op:
        op.read(message)
        unit = op.write("mem:1", "User moved to Lisbon", kind="memory_unit")
        store.append({"text": unit.content, "metadata": op.lineage_metadata(unit)})
    provider.shutdown()
    json.dump(store, open(sys.argv[2], "w"))
""")

READER = textwrap.dedent("""
    import json, sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from memtrace_otel import Category, MemoryTracer
    from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(sys.argv[1])))
    mt = MemoryTracer(provider, capture_content=True)
    store = json.load(open(sys.argv[2]))
    with mt.operation("search", Category.RETRIEVAL) as op:
        units = [op.read_record(r["metadata"], content=r["text"]) for r in store]
        op.record_retrieval(units, top_k=3, data_source_id="store.json")
        context = op.write("context:q1", units[0].content, kind="context")
    with mt.operation("generate", Category.GENERATION) as op:
        op.read(context)
        op.write("answer:q1", "Lisbon", kind="answer")
    provider.shutdown()
""")


def test_lineage_crosses_processes(tmp_path) -> None:
    writer_spans, reader_spans, store = tmp_path / "w.jsonl", tmp_path / "r.jsonl", tmp_path / "store.json"
    subprocess.run([sys.executable, "-c", WRITER, str(writer_spans), str(store)], check=True)
    subprocess.run([sys.executable, "-c", READER, str(reader_spans), str(store)], check=True)

    reader_only = read_span_files([reader_spans])
    (search,) = [s for s in reader_only.spans if s.name == "search"]
    (link,) = search.links
    writer_only = read_span_files([writer_spans])
    (extract,) = [s for s in writer_only.spans if s.name == "extract"]
    assert (link.trace_id, link.span_id) == (extract.trace_id, extract.span_id)
    assert link.attributes["memtrace.link.variable"] == "mem:1@1"
    # The retrieval says how much it returned (the record written in the other process; a search
    # carries no gen_ai.memory.record.id, which the conventions keep for the record an operation acts on).
    assert (search.attributes["gen_ai.memory.record.count"],
            search.attributes["gen_ai.data_source.id"]) == (1, "store.json")
    assert "gen_ai.memory.record.id" not in search.attributes
    assert json.loads(store.read_text())[0]["metadata"]["memtrace_variable"] == "mem:1@1"

    alone = build_graph(reader_only.spans)
    assert alone.graph["missing_traces"] == {extract.trace_id}
    G = build_graph(read_span_files([writer_spans, reader_spans]).spans)
    assert G.graph["missing_traces"] == set()
    path = lineage_path(G, "msg:D1:1@1", "answer:q1@1")
    assert G.nodes[producer_of(G, "mem:1@1")]["span_id"] == extract.span_id
    assert [G.nodes[n]["name"] for n in path if n.startswith("op:")] == ["extract", "search", "generate"]
